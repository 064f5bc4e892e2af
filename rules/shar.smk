checkpoint shar_plan:
    input:
        unpack(get_shar_plan_inputs),
    output:
        plan=DS.shard_plan,
    log:
        layout.log("shar_plan", "{dataset}"),
    benchmark:
        layout.benchmark("shar_plan", "{dataset}")
    params:
        shard_size=config["shar"]["shard_size"],
        seed=config["shar"]["seed"],
        shards_per_job=config["shar"]["shards_per_job"],
        grow=config["shar"]["grow"],
        leaks=config["shar"]["leaks"],
        indexed=config["shar"]["index"],
        split=lambda wildcards: split_of(wildcards.dataset),
    resources:
        mem_mb=RESOURCES.mem_mb("shar_plan"),
        runtime=RESOURCES.runtime("shar_plan"),
    script:
        "../workflow_scripts/shar_plan.py"


# A shar job writes a block of shar.shards_per_job shards (as codes jobs do, rules/codes.smk): fewer
# jobs for Snakemake to plan and for Slurm to run; each shard is still written atomically on its own,
# and a killed job's rerun keeps the shards it finished. One rule per kind of job: sharflow.work.jobs.
for kind in job_kinds("shar"):

    rule:
        name:
            kind.name
        input:
            unpack(get_shar_block_inputs(kind.count)),
        output:
            **DS.shard_block("{block}", kind.size, kind.count),
        log:
            layout.log(kind.name, "{dataset}", "{block}"),
        benchmark:
            layout.benchmark(kind.name, "{dataset}", "{block}")
        params:
            shards=kind.count,
            settings=get_encode_settings,
        threads: SHAR_THREADS
        resources:
            mem_mb=RESOURCES.mem_mb(kind.name),
            runtime=RESOURCES.runtime(kind.name),
        wildcard_constraints:
            block=rf"\d{{{6 - blocks.block_digits(kind.size)}}}",
        script:
            "../workflow_scripts/shar_block.py"


workflow.ruleorder(*(kind.name for kind in job_kinds("shar")))


rule shar_merge:
    input:
        jobs=get_job_records("shar"),
        plan=DS.shard_plan,
        context_stats=get_dataset_file("context_stats"),
    output:
        stats=DS.shar_stats,
        rejected=directory(DS.shar_rejected),
    log:
        layout.log("shar_merge", "{dataset}"),
    benchmark:
        layout.benchmark("shar_merge", "{dataset}")
    resources:
        mem_mb=RESOURCES.mem_mb("shar_merge"),
        runtime=RESOURCES.runtime("shar_merge"),
    script:
        "../workflow_scripts/shar_merge.py"
