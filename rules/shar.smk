checkpoint shar_plan:
    input:
        with_context=DS.with_context,
    output:
        plan=DS.shard_plan,
        index=DS.shar_index,
    log:
        layout.log("shar_plan", "{dataset}"),
    benchmark:
        layout.benchmark("shar_plan", "{dataset}")
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
        layout.log("shar_shard", "{dataset}", "{shard}"),
    benchmark:
        layout.benchmark("shar_shard", "{dataset}", "{shard}")
    params:
        settings=get_encode_settings,
    threads: SHAR_THREADS
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/shar_shard.py"


rule shar_merge:
    input:
        stats=get_shard_files("stats"),
        context_stats=DS.context_stats,
    output:
        stats=DS.shar_stats,
        rejected=directory(DS.shar_rejected),
    log:
        layout.log("shar_merge", "{dataset}"),
    benchmark:
        layout.benchmark("shar_merge", "{dataset}")
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/shar_merge.py"
