rule splits:
    input:
        unpack(get_splits_inputs),
    output:
        records=DS.split_records,
        rejected=directory(DS.split_rejected),
        stats=DS.split_stats,
    log:
        layout.log("splits", "{dataset}"),
    benchmark:
        layout.benchmark("splits", "{dataset}")
    params:
        dataset=get_split_dataset,
        empty=get_empty_split_action,
    resources:
        mem_mb=RESOURCES.mem_mb("splits"),
        runtime=RESOURCES.runtime("splits"),
    script:
        "../workflow_scripts/splits.py"
