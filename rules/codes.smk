rule build_random_codec:
    input:
        config=get_random_codec_config,
    output:
        model=layout.codec_model("{codec}"),
    log:
        "logs/build_random_codec/{codec}.log",
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
        "logs/codec_model/{codec}.log",
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
        "logs/codes_shard/{dataset}/{codec}/{shard}.log",
    benchmark:
        "logs/codes_shard/{dataset}/{codec}/{shard}.benchmark.tsv"
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
        stats=get_codes_job_stats,
    output:
        stats=DS.codes_stats("{codec}"),
    log:
        "logs/codes_merge/{dataset}/{codec}.log",
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/codes_merge.py"
