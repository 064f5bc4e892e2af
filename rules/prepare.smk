rule prepare:
    input:
        manifest=get_manifest,
    output:
        prepared="results/{dataset}/prepare/prepared.jsonl",
        rejected=directory("results/{dataset}/prepare/rejected"),
        stats="results/{dataset}/prepare/stats.json",
    log:
        "logs/prepare/{dataset}.log",
    benchmark:
        "logs/prepare/{dataset}.benchmark.tsv"
    params:
        settings=get_prepare_settings,
    threads: get_prepare_threads
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/prepare.py"
