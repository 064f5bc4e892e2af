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


# A shar job writes a block of shar.shards_per_job shards (as codes jobs do, rules/codes.smk): fewer
# jobs for Snakemake to plan and for Slurm to run; each shard is still written atomically on its own.
for size in SHAR_BLOCK_SIZES:

    rule:
        name:
            block_rule("shar", size)
        input:
            unpack(get_shar_block_inputs(size)),
        output:
            **DS.shard_block("{block}", size),
        log:
            layout.log(block_rule("shar", size), "{dataset}", "{block}"),
        benchmark:
            layout.benchmark(block_rule("shar", size), "{dataset}", "{block}")
        params:
            settings=get_encode_settings,
        threads: SHAR_THREADS
        resources:
            mem_mb=4000,
        wildcard_constraints:
            block=rf"\d{{{6 - layout.block_digits(size)}}}",
        script:
            "../workflow_scripts/shar_block.py"


rule shar_shard:
    input:
        with_context=DS.with_context,
        plan=DS.shard_plan,
        index=DS.shar_index,
    output:
        **DS.shard_block("{shard}", 1),
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
        "../workflow_scripts/shar_block.py"


workflow.ruleorder(*(block_rule("shar", size) for size in SHAR_BLOCK_SIZES), "shar_shard")


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
