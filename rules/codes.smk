rule build_random_codec:
    input:
        config=get_random_codec_config,
    output:
        model=layout.codec_model("{codec}"),
    log:
        layout.log("build_random_codec", "{codec}"),
    params:
        # built once per machine, in sharflow's cache (sharflow.models.random_init.cached_random_model)
        cache_dir=TEXT_CACHE,
    resources:
        mem_mb=RESOURCES.mem_mb("build_random_codec"),
        runtime=RESOURCES.runtime("build_random_codec"),
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
        mem_mb=RESOURCES.mem_mb("codec_model"),
        runtime=RESOURCES.runtime("codec_model"),
    script:
        "../workflow_scripts/codec_model.py"


# A codes job encodes a block of codes.shards_per_job shards (shard keys sharing all digits but the
# last), loading the codec once per rank, and a killed job's rerun keeps the shards it finished.
# Where the plan ends inside a block, smaller blocks, then one job for the last 2-9 shards or the last
# one: a rule per kind of job (sharflow.work.jobs); get_codes_block_inputs hands a block the plan
# does not have to the next rule.
for kind in job_kinds("codes"):

    rule:
        name:
            kind.name
        input:
            unpack(get_codes_block_inputs(kind.count)),
        output:
            **DS.codes_block("{codec}", "{block}", kind.size, kind.count),
        log:
            layout.log(kind.name, "{dataset}", "{codec}", "{block}"),
        benchmark:
            layout.benchmark(kind.name, "{dataset}", "{codec}", "{block}")
        params:
            shards=kind.count,
            batch_seconds=config["codes"]["batch_seconds"],
            device=config["codes"]["device"],
        threads: CODES_THREADS
        resources:
            gpu=CODES_GPUS,
            mem_mb=RESOURCES.mem_mb(kind.name),
            runtime=RESOURCES.runtime(kind.name),
        wildcard_constraints:
            block=rf"\d{{{6 - blocks.block_digits(kind.size)}}}",
        script:
            "../workflow_scripts/codes_block.py"


workflow.ruleorder(*(kind.name for kind in job_kinds("codes")))


rule codes_merge:
    input:
        jobs=get_job_records("codes"),
        plan=DS.shard_plan,
    output:
        stats=DS.codes_stats("{codec}"),
    log:
        layout.log("codes_merge", "{dataset}", "{codec}"),
    resources:
        mem_mb=RESOURCES.mem_mb("codes_merge"),
        runtime=RESOURCES.runtime("codes_merge"),
    script:
        "../workflow_scripts/codes_merge.py"
