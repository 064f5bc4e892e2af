checkpoint shar_plan:
    input:
        with_context=DS.with_context,
    output:
        plan=DS.shard_plan,
        index=DS.shar_index,
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
        with_context=DS.with_context,
        plan=DS.shard_plan,
        index=DS.shar_index,
    output:
        **DS.shard("{shard}").named(),
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
        stats=get_shar_job_stats,
        context_stats=DS.context_stats,
    output:
        stats=DS.shar_stats,
        rejected=directory(DS.shar_rejected),
    log:
        "logs/shar_merge/{dataset}.log",
    benchmark:
        "logs/shar_merge/{dataset}.benchmark.tsv"
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/shar_merge.py"
