rule context_plan:
    input:
        prepared="results/{dataset}/prepare/prepared.jsonl",
    output:
        plan="results/{dataset}/context/plan.json",
    log:
        "logs/context_plan/{dataset}.log",
    benchmark:
        "logs/context_plan/{dataset}.benchmark.tsv"
    params:
        grouping=get_grouping,
        parts=config["context"]["parts"],
        cost_per_audio_second=config["context"]["cost_per_audio_second"],
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/context_plan.py"


rule context_part:
    input:
        prepared="results/{dataset}/prepare/prepared.jsonl",
        plan="results/{dataset}/context/plan.json",
    output:
        records="results/{dataset}/context/parts/part-{part}.jsonl",
        rejected="results/{dataset}/context/parts/part-{part}.rejected.jsonl",
        stats="results/{dataset}/context/parts/part-{part}.stats.json",
        **get_embedding_outputs(),
    log:
        "logs/context_part/{dataset}/part-{part}.log",
    benchmark:
        "logs/context_part/{dataset}/part-{part}.benchmark.tsv"
    params:
        settings=get_context_part_settings,
        device=config["context"]["device"],
    threads: get_context_threads
    resources:
        gpu=get_context_gpus,
        mem_mb=8000,
    script:
        "../workflow_scripts/context_part.py"


rule context_merge:
    input:
        records=get_context_parts("jsonl"),
        rejected=get_context_parts("rejected.jsonl"),
        stats=get_context_parts("stats.json"),
        prepare_stats="results/{dataset}/prepare/stats.json",
    output:
        with_context="results/{dataset}/context/with_context.jsonl",
        rejected=directory("results/{dataset}/context/rejected"),
        stats="results/{dataset}/context/stats.json",
    log:
        "logs/context_merge/{dataset}.log",
    benchmark:
        "logs/context_merge/{dataset}.benchmark.tsv"
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/context_merge.py"
