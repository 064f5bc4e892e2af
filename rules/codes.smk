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


# A codes job encodes a block of codes.shards_per_job shards (shard keys sharing all digits but the
# last), loading the codec once per rank. Snakemake needs a rule's outputs from its wildcards alone,
# so a block job always makes all of its shards: where the plan ends inside a block, that block's
# shards are made in blocks a tenth the size (codes_block10 for 10 when shards_per_job is 100 or
# more), and the last few by codes_shard, one job each: at most 9 per level.
# get_codes_block_inputs hands a block that reaches past the plan's last shard to the next rule.
for size in CODES_BLOCK_SIZES:

    rule:
        name:
            block_rule("codes", size)
        input:
            unpack(get_codes_block_inputs(size)),
        output:
            **DS.codes_block("{codec}", "{block}", size),
        log:
            layout.log(block_rule("codes", size), "{dataset}", "{codec}", "{block}"),
        benchmark:
            layout.benchmark(block_rule("codes", size), "{dataset}", "{codec}", "{block}")
        params:
            batch_seconds=config["codes"]["batch_seconds"],
            device=config["codes"]["device"],
        threads: CODES_THREADS
        resources:
            gpu=CODES_GPUS,
            mem_mb=16000,
        wildcard_constraints:
            block=rf"\d{{{6 - layout.block_digits(size)}}}",
        script:
            "../workflow_scripts/codes_block.py"


workflow.ruleorder(*(block_rule("codes", size) for size in CODES_BLOCK_SIZES), "codes_shard")


rule codes_shard:
    input:
        target_0=DS.shard("{shard}").target,
        context_0=DS.shard("{shard}").context,
        codec=layout.codec_spec("{codec}"),
    output:
        **DS.codes_block("{codec}", "{shard}", 1),
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
        "../workflow_scripts/codes_block.py"


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
