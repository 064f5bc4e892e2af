rule buckets:
    input:
        cuts=get_shard_files("results/{dataset}/shar/cuts/cuts.{shard}.jsonl.gz"),
    output:
        buckets="results/{dataset}/buckets.yaml",
    log:
        "logs/buckets/{dataset}.log",
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
        cuts=get_all_cut_files,
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
