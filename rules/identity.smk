# Only with quality off: with quality on, the quality parts write these files (rules/quality.smk).
if not QUALITY:

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


# Over every dataset: the held-out index (and the speaker links, the duplicates within train), then
# identity.check_parts jobs side by side that look the train records up in it (a query's cost grows
# with the held-out set), then their merge: the links every splits job reads.
rule identity_index:
    input:
        records=get_identity_part_files("records"),
        hashes=get_identity_part_files("hashes"),
        voices=get_identity_part_files("voices"),
    output:
        **layout.IDENTITY_INDEX.named(),
        decisions=update(layout.SPEAKER_DECISIONS),
    log:
        layout.log("identity_index"),
    benchmark:
        layout.benchmark("identity_index")
    params:
        datasets=get_identity_datasets,
        min_score=config["identity"]["min_score"],
        min_matched=config["identity"]["min_matched"],
        train_duplicates=config["identity"]["train_duplicates"],
        voices=config["identity"]["voices"],
    resources:
        mem_mb=RESOURCES.mem_mb("identity_index"),
        runtime=RESOURCES.runtime("identity_index"),
    script:
        "../workflow_scripts/identity_index.py"


rule identity_check:
    input:
        **layout.IDENTITY_INDEX.named(),
        records=get_identity_part_files("records"),
        hashes=get_identity_part_files("hashes"),
    output:
        **layout.identity_check("{part}").named(),
    log:
        layout.log("identity_check", "part-{part}"),
    benchmark:
        layout.benchmark("identity_check", "part-{part}")
    params:
        datasets=lambda wildcards: get_identity_datasets(wildcards, voices=False),
        parts=config["identity"]["check_parts"],
        min_score=config["identity"]["min_score"],
        min_matched=config["identity"]["min_matched"],
        train_duplicates=config["identity"]["train_duplicates"],
    resources:
        mem_mb=RESOURCES.mem_mb("identity_check"),
        runtime=RESOURCES.runtime("identity_check"),
    script:
        "../workflow_scripts/identity_check.py"


rule identity_merge:
    input:
        summary=layout.IDENTITY_INDEX.summary,
        links=get_identity_checks("links"),
        stats=get_identity_checks("stats"),
    output:
        links=layout.IDENTITY_LINKS,
        stats=layout.IDENTITY_STATS,
    log:
        layout.log("identity_merge"),
    benchmark:
        layout.benchmark("identity_merge")
    params:
        min_score=config["identity"]["min_score"],
        min_matched=config["identity"]["min_matched"],
        train_duplicates=config["identity"]["train_duplicates"],
    resources:
        mem_mb=RESOURCES.mem_mb("identity_merge"),
        runtime=RESOURCES.runtime("identity_merge"),
    script:
        "../workflow_scripts/identity_merge.py"
