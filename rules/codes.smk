rule build_random_codec:
    input:
        config=get_random_codec_config,
    output:
        model="results/models/{codec}.nemo",
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
        spec="results/models/{codec}.json",
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
        target="results/{dataset}/shar/target_audio/recording.{shard}.tar",
        context="results/{dataset}/shar/context_audio/recording.{shard}.tar",
        codec="results/models/{codec}.json",
    output:
        target="results/{dataset}/shar/codes_{codec}/target_codes/codes.{shard}.tar",
        context="results/{dataset}/shar/codes_{codec}/context_codes/codes.{shard}.tar",
        stats="results/{dataset}/codes_jobs/{codec}/shard-{shard}.stats.json",
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
        stats=get_shard_files("results/{dataset}/codes_jobs/{codec}/shard-{shard}.stats.json"),
    output:
        stats="results/{dataset}/codes_stats/{codec}.json",
    log:
        "logs/codes_merge/{dataset}/{codec}.log",
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/codes_merge.py"
