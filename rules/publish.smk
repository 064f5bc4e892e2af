rule publish:
    input:
        unpack(get_publish_inputs),
    output:
        published=update(layout.PUBLISHED),
    log:
        layout.log("publish"),
    params:
        datasets=[layout.dataset_files(name).root for name in DATASETS],
        held_out=[layout.dataset_files(name).root for name in HELD_OUT_SETS],
        codecs=CODECS,
        settings=config["publish"],
    resources:
        mem_mb=RESOURCES.mem_mb("publish"),
        runtime=RESOURCES.runtime("publish"),
    script:
        "../workflow_scripts/publish.py"
