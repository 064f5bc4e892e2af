# a random ASR model for quality.asr (results/models/asr/random.nemo) or segment.asr (segment.nemo)
rule build_random_asr:
    input:
        config=get_random_asr_config,
    output:
        model=layout.RANDOM_ASR,
    log:
        layout.log("build_random_asr", "{asr}"),
    params:
        # built once per machine, in sharflow's cache (sharflow.models.random_init.cached_random_model)
        cache_dir=TEXT_CACHE,
    resources:
        mem_mb=RESOURCES.mem_mb("build_random_asr"),
        runtime=RESOURCES.runtime("build_random_asr"),
    script:
        "../workflow_scripts/build_random_asr.py"


# quality_part runs its models on the GPUs it asks for; with quality.device: cpu the same job is
# quality_part_cpu, which the Slurm profile sends to the CPU partition with more cores (no GPU idle).
# The same decode gives the context stage's speaker embeddings and, with identity, the identity
# parts (fingerprints, digests, voices): no stage before Shar decodes a record again.
rule quality_part:
    name:
        QUALITY_PART_RULE
    input:
        records=DS.text_records,
        asr_model=get_asr_model_file,
    output:
        **quality_part_outputs(),
    log:
        layout.log(QUALITY_PART_RULE, "{dataset}", "part-{part}"),
    benchmark:
        layout.benchmark(QUALITY_PART_RULE, "{dataset}", "part-{part}")
    params:
        parts=config["quality"]["parts"],
        audio_root=get_audio_root,
        device=config["quality"]["device"],
        dnsmos_max_windows=config["quality"]["dnsmos_max_windows"],
        batch_seconds=config["quality"]["batch_seconds"],
        asr=get_asr_options,
        # the last run's metrics and embedding rows (the merge's outputs, not inputs): the measures
        # still valid are kept
        last_run=get_last_quality_run,
        identity=get_identity_options,
        # the context stage's speaker embeddings, from the same decode
        embedder=get_speaker_embedding,
        fit_ranks=fits_work("quality"),
    threads: threads_of("quality")
    resources:
        gpu=QUALITY_GPUS,
        mem_mb=RESOURCES.mem_mb(QUALITY_PART_RULE),
        runtime=RESOURCES.runtime(QUALITY_PART_RULE),
    script:
        "../workflow_scripts/quality_part.py"


rule quality_merge:
    input:
        metrics=get_part_files("quality", "metrics"),
        embeddings=get_part_files("quality", "embeddings"),
        stats=get_part_files("quality", "stats"),
        records_stats=DS.text_stats,
    output:
        metrics=DS.quality_metrics,
        embeddings=DS.quality_embeddings,
        stats=DS.quality_metrics_stats,
    log:
        layout.log("quality_merge", "{dataset}"),
    benchmark:
        layout.benchmark("quality_merge", "{dataset}")
    resources:
        mem_mb=RESOURCES.mem_mb("quality_merge"),
        runtime=RESOURCES.runtime("quality_merge"),
    script:
        "../workflow_scripts/quality_merge.py"


rule quality_filter:
    input:
        records=DS.text_records,
        metrics=DS.quality_metrics,
        records_stats=DS.text_stats,
    output:
        kept=DS.quality_kept,
        rejected=directory(DS.quality_rejected),
        stats=DS.quality_stats,
    log:
        layout.log("quality_filter", "{dataset}"),
    benchmark:
        layout.benchmark("quality_filter", "{dataset}")
    params:
        filters=config["quality"]["filters"],
        action=config["quality"]["action"],
    resources:
        mem_mb=RESOURCES.mem_mb("quality_filter"),
        runtime=RESOURCES.runtime("quality_filter"),
    script:
        "../workflow_scripts/quality_filter.py"
