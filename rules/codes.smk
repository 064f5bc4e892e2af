rule build_random_codec:
    input:
        config=get_random_codec_config,
    output:
        model=layout.codec_model("{codec}"),
    log:
        layout.log("build_random_codec", "{codec}"),
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/build_random_codec.py"


rule codec_model:
    input:
        model=get_codec_model_file,
    output:
        spec=layout.codec_spec("{codec}"),
    log:
        layout.log("codec_model", "{codec}"),
    params:
        codec=get_codec_spec,
    resources:
        mem_mb=500,
    script:
        "../workflow_scripts/codec_model.py"


rule codes_shard:
    input:
        target=DS.shard("{shard}").target,
        context=DS.shard("{shard}").context,
        codec=layout.codec_spec("{codec}"),
    output:
        **DS.codes("{codec}", "{shard}").named(),
    log:
        layout.log("codes_shard", "{dataset}", "{codec}", "{shard}"),
    benchmark:
        layout.benchmark("codes_shard", "{dataset}", "{codec}", "{shard}")
    params:
        batch_seconds=config["codes"]["batch_seconds"],
        device=config["codes"]["device"],
    threads: CODES_THREADS
    resources:
        gpu=CODES_GPUS,
        mem_mb=16000,
    script:
        "../workflow_scripts/codes_shard.py"


rule codes_merge:
    input:
        stats=get_shard_files("stats", codec=True),
    output:
        stats=DS.codes_stats("{codec}"),
    log:
        layout.log("codes_merge", "{dataset}", "{codec}"),
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/codes_merge.py"
