rule context_plan:
    input:
        records=get_context_records,
    output:
        plan=DS.context_plan,
    log:
        layout.log("context_plan", "{dataset}"),
    benchmark:
        layout.benchmark("context_plan", "{dataset}")
    params:
        grouping=get_grouping,
        parts=config["context"]["parts"],
        cost_per_audio_second=config["context"]["cost_per_audio_second"],
    resources:
        mem_mb=RESOURCES.mem_mb("context_plan"),
        runtime=RESOURCES.runtime("context_plan"),
    script:
        "../workflow_scripts/context_plan.py"


# With quality on, a context part reads every record's embedding from the quality parts (one decode)
# and selects on CPU; with quality off, it decodes and embeds on context.device.
rule context_part:
    input:
        unpack(get_measured_embeddings),
        records=get_context_records,
        plan=DS.context_plan,
    output:
        **DS.context_part("{part}").named(),
        **get_embedding_outputs(),
    log:
        layout.log("context_part", "{dataset}", "part-{part}"),
    benchmark:
        layout.benchmark("context_part", "{dataset}", "part-{part}")
    params:
        settings=get_context_part_settings,
        device=CONTEXT_DEVICE,
        fit_ranks=fits_work("context"),
    threads: threads_of("context")
    resources:
        gpu=CONTEXT_GPUS,
        mem_mb=RESOURCES.mem_mb("context_part"),
        runtime=RESOURCES.runtime("context_part"),
    script:
        "../workflow_scripts/context_part.py"


rule context_merge:
    input:
        records=get_part_files("context", "records"),
        rejected=get_part_files("context", "rejected"),
        stats=get_part_files("context", "stats"),
        records_stats=get_context_records_stats,
    output:
        with_context=DS.with_context,
        rejected=directory(DS.context_rejected),
        stats=DS.context_stats,
    log:
        layout.log("context_merge", "{dataset}"),
    benchmark:
        layout.benchmark("context_merge", "{dataset}")
    resources:
        mem_mb=RESOURCES.mem_mb("context_merge"),
        runtime=RESOURCES.runtime("context_merge"),
    script:
        "../workflow_scripts/context_merge.py"
