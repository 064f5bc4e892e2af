"""Which inputs each of bench_scale's jobs reads, and making only those for a size."""

from pathlib import Path

from scale.corpus import corpus, write_catalog, write_shard_files, write_with_context
from scale.handoff_inputs import (
    write_evaluation_inputs,
    write_prepare_inputs,
    write_report_inputs,
    write_verify_inputs,
)
from scale.jobs import JOBS, write_identity_checks
from scale.stage_inputs import (
    write_card_inputs,
    write_context_parts,
    write_fingerprints,
    write_identity_parts,
    write_quality_inputs,
    write_text_parts,
)

STEP_NEEDS = {
    "shard_files": ("with_context",),
    "context_parts": ("with_context",),
    "quality_inputs": ("with_context",),
    "text_parts": ("quality_inputs",),
    "identity_parts": ("quality_inputs",),
    "fingerprints": ("identity_parts",),
    "identity_checks": ("fingerprints",),
    "card_inputs": ("shard_files",),
    "report_inputs": ("prepare_inputs", "text_parts", "context_parts", "card_inputs", "identity_checks"),
    "evaluation_inputs": ("with_context",),
    "verify_inputs": ("with_context",),
}
JOB_INPUTS = {
    "prepare": ("prepare_inputs",),
    "text_merge": ("text_parts",),
    "splits": ("identity_parts",),
    "context_plan": ("with_context",),
    "shar_plan": ("with_context",),
    "calibration_sample": ("with_context",),
    "buckets": ("catalog",),
    "catalog": ("shard_files",),
    "shar_merge": ("shard_files",),
    "codes_merge": ("shard_files",),
    "input_cfg": ("catalog", "shard_files"),
    "validation_ds": ("catalog", "shard_files"),
    "context_merge": ("context_parts",),
    "quality_merge": ("quality_inputs",),
    "quality_filter": ("quality_inputs",),
    "identity_index": ("fingerprints",),
    "identity_check": ("identity_checks",),
    "identity_merge": ("identity_checks",),
    "dataset_card": ("card_inputs",),
    "evaluation_set": ("evaluation_inputs",),
    "verify": ("verify_inputs",),
    "report": ("report_inputs",),
}


def needed_steps(jobs: list[str]) -> set[str]:
    """The input steps `jobs` read, with the steps those read."""
    todo, steps = [step for job in jobs for step in JOB_INPUTS[job]], set()
    while todo:
        step = todo.pop()
        if step not in steps:
            steps.add(step)
            todo.extend(STEP_NEEDS.get(step, ()))
    return steps


def make_inputs(n: int, folder: Path, jobs: list[str] | None = None) -> None:
    """The input files `jobs` (default: every job) read, for `n` records, in `folder` (kept: each step
    made once, marked done by a file of its name)."""
    wanted = needed_steps(list(JOBS) if jobs is None else jobs)
    folder.mkdir(parents=True, exist_ok=True)
    columns = corpus(n)
    records = folder / "with_context.jsonl"
    steps = {
        "with_context": lambda: write_with_context(columns, records),
        "catalog": lambda: write_catalog(columns, folder / "catalog.parquet"),
        "shard_files": lambda: write_shard_files(records, folder),
        "context_parts": lambda: write_context_parts(records, folder),
        "quality_inputs": lambda: write_quality_inputs(records, folder),
        "text_parts": lambda: write_text_parts(folder),
        "identity_parts": lambda: write_identity_parts(records, folder),
        "fingerprints": lambda: write_fingerprints(folder),
        "identity_checks": lambda: write_identity_checks(folder),
        "card_inputs": lambda: write_card_inputs(folder),
        "prepare_inputs": lambda: write_prepare_inputs(columns, folder),
        "report_inputs": lambda: write_report_inputs(folder),
        "evaluation_inputs": lambda: write_evaluation_inputs(records, folder),
        "verify_inputs": lambda: write_verify_inputs(records, folder),
    }
    for name, step in steps.items():
        done = folder / "inputs" / f"{name}.done"
        if name in wanted and not done.exists():
            step()
            done.parent.mkdir(exist_ok=True)
            done.write_text(str(n))
