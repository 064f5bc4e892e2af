# The segment stage of long_form datasets (sharflow.segment): the recordings planned into parts by
# hours, each part segmented (resumable by recording: each one's result is kept as it is done), then
# one merge into the NeMo manifest of segments that prepare reads like any other.
rule segment_plan:
    input:
        recordings=get_segment_inputs,
    output:
        plan=DS.segment_plan,
    log:
        layout.log("segment_plan", "{dataset}"),
    benchmark:
        layout.benchmark("segment_plan", "{dataset}")
    params:
        listing=get_segment_listing,
        parts=config["segment"]["parts"],
    resources:
        mem_mb=RESOURCES.mem_mb("segment_plan"),
        runtime=RESOURCES.runtime("segment_plan"),
    script:
        "../workflow_scripts/segment_plan.py"


# Its recordings' results go to segment/work/<settings digest>/ (not an output: a killed or failed job
# leaves them, and the next one resumes after them); the part's stats are written last.
rule segment_part:
    input:
        plan=DS.segment_plan,
        asr_model=get_segment_asr_file,
    output:
        stats=DS.segment_part("{part}"),
    log:
        layout.log("segment_part", "{dataset}", "part-{part}"),
    benchmark:
        layout.benchmark("segment_part", "{dataset}", "part-{part}")
    params:
        audio_root=get_audio_root,
        work=get_segment_work,
        settings=get_segment_settings,
        device=config["segment"]["device"],
        fit_ranks=fits_work("segment"),
    threads: threads_of("segment")
    resources:
        gpu=SEGMENT_GPUS,
        mem_mb=RESOURCES.mem_mb("segment_part"),
        runtime=RESOURCES.runtime("segment_part"),
    script:
        "../workflow_scripts/segment_part.py"


rule segment_merge:
    input:
        plan=DS.segment_plan,
        parts=get_segment_parts,
    output:
        manifest=DS.segment_manifest,
        stats=DS.segment_stats,
    log:
        layout.log("segment_merge", "{dataset}"),
    benchmark:
        layout.benchmark("segment_merge", "{dataset}")
    params:
        settings=get_segment_settings,
        link_similarity=config["segment"]["link_similarity"],
    resources:
        mem_mb=RESOURCES.mem_mb("segment_merge"),
        runtime=RESOURCES.runtime("segment_merge"),
    script:
        "../workflow_scripts/segment_merge.py"
