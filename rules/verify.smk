rule verify:
    input:
        codes_stats=lambda wildcards: list(get_codes_stats(wildcards).values()),
        plan="results/{dataset}/shard_plan.json",
        shar_stats="results/{dataset}/shar_stats.json",
    output:
        verify="results/{dataset}/verify.json",
    log:
        "logs/verify/{dataset}.log",
    params:
        shar_dir="results/{dataset}/shar",
        codes_stats=get_codes_stats,
    threads: get_verify_threads
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/verify.py"
