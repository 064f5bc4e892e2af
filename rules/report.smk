rule report:
    input:
        unpack(get_report_inputs),
    output:
        durations=report("results/report/durations.png", caption="report/durations.rst", category="Data"),
        buckets=report("results/report/buckets.png", caption="report/buckets.rst", category="Data"),
        similarity=report("results/report/similarity.png", caption="report/similarity.rst", category="Context"),
        load=report("results/report/load.png", caption="report/load.rst", category="Context"),
        rejects=report("results/report/rejects.png", caption="report/rejects.rst", category="Records"),
        summary=report("results/report/summary.html", caption="report/summary.rst", category="Records"),
        summary_tsv="results/report/summary.tsv",
    log:
        "logs/report/report.log",
    params:
        datasets=get_report_datasets,
        min_similarity=config["context"]["min_similarity"],
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/report.py"
