rule buckets:
    input:
        plan="results/{dataset}/shard_plan.json",
        shar_stats="results/{dataset}/shar_stats.json",
    output:
        buckets="results/{dataset}/buckets.yaml",
    log:
        "logs/buckets/{dataset}.log",
    params:
        shar_dir="results/{dataset}/shar",
        num_buckets=config["buckets"]["num_buckets"],
        sub_buckets=config["buckets"]["sub_buckets"],
        z_threshold=config["buckets"]["z_threshold"],
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/buckets.py"


rule input_cfg:
    input:
        shar_stats=expand("results/{dataset}/shar_stats.json", dataset=DATASETS),
        codes=get_training_codes_stats,
        plans=expand("results/{dataset}/shard_plan.json", dataset=DATASETS),
    output:
        input_cfg="results/input_cfg.yaml",
    log:
        "logs/input_cfg/input_cfg.log",
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
