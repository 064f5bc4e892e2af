checkpoint shar_plan:
    input:
        with_context="results/{dataset}/context/with_context.jsonl",
    output:
        plan="results/{dataset}/shard_plan.json",
        index="results/{dataset}/shar_index.npy",
    log:
        "logs/shar_plan/{dataset}.log",
    benchmark:
        "logs/shar_plan/{dataset}.benchmark.tsv"
    params:
        shard_size=config["shar"]["shard_size"],
        seed=config["shar"]["seed"],
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/shar_plan.py"


rule shar_shard:
    input:
        with_context="results/{dataset}/context/with_context.jsonl",
        plan="results/{dataset}/shard_plan.json",
        index="results/{dataset}/shar_index.npy",
    output:
        cuts="results/{dataset}/shar/cuts/cuts.{shard}.jsonl.gz",
        target="results/{dataset}/shar/target_audio/recording.{shard}.tar",
        context="results/{dataset}/shar/context_audio/recording.{shard}.tar",
        stats="results/{dataset}/shar_jobs/shard-{shard}.stats.json",
        rejected="results/{dataset}/shar_jobs/shard-{shard}.rejected.jsonl",
    log:
        "logs/shar_shard/{dataset}/{shard}.log",
    benchmark:
        "logs/shar_shard/{dataset}/{shard}.benchmark.tsv"
    params:
        settings=get_encode_settings,
    threads: SHAR_THREADS
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/shar_shard.py"


rule shar_merge:
    input:
        stats=get_shard_files("results/{dataset}/shar_jobs/shard-{shard}.stats.json"),
        context_stats="results/{dataset}/context/stats.json",
    output:
        stats="results/{dataset}/shar_stats.json",
        rejected=directory("results/{dataset}/shar_rejected"),
    log:
        "logs/shar_merge/{dataset}.log",
    benchmark:
        "logs/shar_merge/{dataset}.benchmark.tsv"
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/shar_merge.py"
