rule context_plan:
    input:
        records=get_context_records,
    output:
        plan=DS.context_plan,
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
        records=get_context_records,
        plan=DS.context_plan,
    output:
        **DS.context_part("{part}").named(),
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
        gpu=CONTEXT_GPUS,
        mem_mb=8000,
    script:
        "../workflow_scripts/context_part.py"


rule context_merge:
    input:
        records=get_context_parts("records"),
        rejected=get_context_parts("rejected"),
        stats=get_context_parts("stats"),
        records_stats=get_context_records_stats,
    output:
        with_context=DS.with_context,
        rejected=directory(DS.context_rejected),
        stats=DS.context_stats,
    log:
        "logs/context_merge/{dataset}.log",
    benchmark:
        "logs/context_merge/{dataset}.benchmark.tsv"
    resources:
        mem_mb=2000,
    script:
        "../workflow_scripts/context_merge.py"
