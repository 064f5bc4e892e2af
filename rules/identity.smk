rule identity_part:
    input:
        records=DS.text_records,
    output:
        # update(): kept while the job runs, whose records measured before are not measured again
        **{name: update(path) for name, path in DS.identity_part("{part}").named().items()},
    log:
        layout.log("identity_part", "{dataset}", "part-{part}"),
    benchmark:
        layout.benchmark("identity_part", "{dataset}", "part-{part}")
    params:
        parts=config["identity"]["parts"],
        audio_root=get_audio_root,
        own_speaker_ids=get_own_speaker_ids,
        voices=get_voice_embedding,
    threads: threads_of("identity")
    resources:
        mem_mb=RESOURCES.mem_mb("identity_part"),
        runtime=RESOURCES.runtime("identity_part"),
    script:
        "../workflow_scripts/identity_part.py"


rule identity:
    input:
        records=get_identity_part_files("records"),
        hashes=get_identity_part_files("hashes"),
        voices=get_identity_part_files("voices"),
    output:
        links=layout.IDENTITY_LINKS,
        stats=layout.IDENTITY_STATS,
        decisions=update(layout.SPEAKER_DECISIONS),
    log:
        layout.log("identity"),
    benchmark:
        layout.benchmark("identity")
    params:
        datasets=get_identity_datasets,
        min_score=config["identity"]["min_score"],
        min_matched=config["identity"]["min_matched"],
        train_duplicates=config["identity"]["train_duplicates"],
        voices=config["identity"]["voices"],
    resources:
        mem_mb=RESOURCES.mem_mb("identity"),
        runtime=RESOURCES.runtime("identity"),
    script:
        "../workflow_scripts/identity.py"
