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
        mem_mb=RESOURCES.mem_mb("buckets"),
        runtime=RESOURCES.runtime("buckets"),
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
        path_prefix=PATH_PREFIX,
        settings={"shuffle": config["training"]["shuffle"], "shard_seed": config["training"]["shard_seed"]},
        group_by=config["training"]["group_by"],
        temperature=config["training"]["reweight_temperature"],
    resources:
        mem_mb=RESOURCES.mem_mb("input_cfg"),
        runtime=RESOURCES.runtime("input_cfg"),
    script:
        "../workflow_scripts/input_cfg.py"


rule validation_ds:
    input:
        shar_stats=lambda wildcards: [
            layout.dataset_files(n).shar_stats for n in get_validation_sets(wildcards)
        ],
        plans=lambda wildcards: [v["plan"] for v in get_validation_sets(wildcards).values()],
        catalogs=lambda wildcards: [v["catalog"] for v in get_validation_sets(wildcards).values()],
        codes=get_validation_codes_stats,
    output:
        validation_ds=layout.VALIDATION_DS,
    log:
        layout.log("validation_ds"),
    params:
        datasets=get_validation_sets,
        codec=get_training_codec(),
        path_prefix=PATH_PREFIX,
        settings={"shuffle": False},
    resources:
        mem_mb=RESOURCES.mem_mb("validation_ds"),
        runtime=RESOURCES.runtime("validation_ds"),
    script:
        "../workflow_scripts/validation_ds.py"


rule evaluation_set:
    input:
        shar_stats=DS.shar_stats,
        verify=DS.verify,
    output:
        evaluation=directory(DS.evaluation),
    log:
        layout.log("evaluation_set", "{dataset}"),
    params:
        name=lambda wildcards: layout.evaluation_name(wildcards.dataset),
        path_prefix=PATH_PREFIX,
    resources:
        mem_mb=RESOURCES.mem_mb("evaluation_set"),
        runtime=RESOURCES.runtime("evaluation_set"),
    wildcard_constraints:
        dataset="|".join(re.escape(name) for name in TEST_SETS) or "(?!)",
    script:
        "../workflow_scripts/evaluation_set.py"
