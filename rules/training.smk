rule buckets:
    input:
        catalog=DS.catalog,
    output:
        buckets=DS.buckets,
    log:
        layout.log("buckets", "{dataset}"),
    params:
        num_buckets=config["buckets"]["num_buckets"],
        sub_buckets=config["buckets"]["sub_buckets"],
        z_threshold=config["buckets"]["z_threshold"],
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/buckets.py"


rule input_cfg:
    input:
        shar_stats=[layout.dataset_files(ds).shar_stats for ds in DATASETS],
        codes=get_training_codes_stats,
        plans=[layout.dataset_files(ds).shard_plan for ds in DATASETS],
        catalogs=[layout.dataset_files(ds).catalog for ds in DATASETS],
    output:
        input_cfg=layout.INPUT_CFG,
    log:
        layout.log("input_cfg"),
    params:
        datasets=get_training_datasets,
        codec=get_training_codec(),
        num_buckets=config["buckets"]["num_buckets"],
        path_prefix=config["training"]["path_prefix"],
        settings={"shuffle": config["training"]["shuffle"], "shard_seed": config["training"]["shard_seed"]},
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/input_cfg.py"
