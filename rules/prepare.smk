rule prepare:
    input:
        manifest=get_manifest,
    output:
        prepared=DS.prepared,
        rejected=directory(DS.prepare_rejected),
        stats=DS.prepare_stats,
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
