rule report:
    input:
        get_report_inputs,
    output:
        durations=report(
            f"{layout.REPORT_DIR}/durations.png", caption="report/durations.rst", category="Data"
        ),
        buckets=report(f"{layout.REPORT_DIR}/buckets.png", caption="report/buckets.rst", category="Data"),
        similarity=report(
            f"{layout.REPORT_DIR}/similarity.png", caption="report/similarity.rst", category="Context"
        ),
        load=report(f"{layout.REPORT_DIR}/load.png", caption="report/load.rst", category="Context"),
        rejects=report(f"{layout.REPORT_DIR}/rejects.png", caption="report/rejects.rst", category="Records"),
        text=report(f"{layout.REPORT_DIR}/text.png", caption="report/text.rst", category="Text"),
        quality=report(f"{layout.REPORT_DIR}/quality.png", caption="report/quality.rst", category="Quality"),
        quality_kept=report(
            f"{layout.REPORT_DIR}/quality_kept.png", caption="report/quality_kept.rst", category="Quality"
        ),
        quality_table=report(
            f"{layout.REPORT_DIR}/quality.html", caption="report/quality_table.rst", category="Quality"
        ),
        quality_tsv=f"{layout.REPORT_DIR}/quality.tsv",
        summary=report(f"{layout.REPORT_DIR}/summary.html", caption="report/summary.rst", category="Records"),
        summary_tsv=f"{layout.REPORT_DIR}/summary.tsv",
        tables=report(f"{layout.REPORT_DIR}/tables.html", caption="report/tables.rst", category="Data"),
        speakers_tsv=f"{layout.REPORT_DIR}/speakers.tsv",
        buckets_tsv=f"{layout.REPORT_DIR}/buckets.tsv",
    log:
        layout.log("report"),
    params:
        datasets=get_report_datasets,
        min_similarity=config["context"]["min_similarity"],
    resources:
        mem_mb=RESOURCES.mem_mb("report"),
        runtime=RESOURCES.runtime("report"),
    script:
        "../workflow_scripts/report.py"
