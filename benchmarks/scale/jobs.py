"""bench_scale's jobs, each the code its workflow script calls, over the inputs made for a size (each
run in a process of its own by scale.measure)."""

import json
from pathlib import Path

import numpy as np

from scale.corpus import CALIBRATION, CONTAINERS, SHARD_SIZE, SHARDS_PER_JOB
from scale.handoff_inputs import report_files, write_plan
from scale.stage_inputs import CONTEXT_PARTS, IDENTITY_CHECKS, IDENTITY_SPLITS, TEXT_PARTS

# ---- the jobs, each run in a process of its own -------------------------------------------------


def job_prepare(folder: Path, out: Path) -> None:
    """prepare's metadata part: the manifest read and checked line by line, each record's recording
    probed (its header, once per recording: CONTAINERS of them, cached), the records written."""
    from sharflow.prepare.job import prepare_dataset

    prepare_dataset(
        str(folder / "prepare" / "manifest.json"),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
        audio_root=str(folder / "prepare" / "audio"),
        workers=1,  # in this process, where its CPU is counted (more workers: the same work, spread)
    )


def job_context_plan(folder: Path, out: Path) -> None:
    from sharflow.context.plan import plan_context

    plan_context(
        str(folder / "with_context.jsonl"),
        plan=str(out / "context_plan.json"),
        parts=64,
        grouping={"preset": "speaker"},
        cost_per_audio_second=0.01,
    )


def job_shar_plan(folder: Path, out: Path) -> None:
    from sharflow.shar.plan import plan_shards

    plan_shards(
        str(folder / "with_context.jsonl"),
        plan=str(out / "shard_plan.json"),
        inputs_dir=str(out / "shar_inputs"),
        shard_size=SHARD_SIZE,
        seed=7,
        shards_per_job=SHARDS_PER_JOB,
        split="train",
    )


def job_buckets(folder: Path, out: Path) -> None:
    from sharflow.dataset.buckets import write_buckets

    write_buckets(str(folder / "catalog.parquet"), str(out / "buckets.yaml"), num_buckets=8, sub_buckets=2)


def merge_fragments(fragments: Path, codes_stats: Path, out: Path) -> None:
    """The catalog job's merge of the shards' catalog fragments in `fragments` into `out` (the plan
    is read only to count tokens, which these runs do not)."""
    from sharflow.dataset.catalog import build_catalog

    build_catalog(
        "emilia",
        fragments=sorted(str(p) for p in fragments.glob("*.catalog.parquet")),
        plan=str(fragments / "plan-unused.json"),
        codes_stats={"codec": str(codes_stats)},
        out=str(out),
    )


def job_catalog(folder: Path, out: Path) -> None:
    merge_fragments(folder / "shards", folder / "codes_stats.json", out / "catalog.parquet")


def job_shar_merge(folder: Path, out: Path) -> None:
    from sharflow.shar.merge import merge_shar_stats

    stats = sorted(str(p) for p in (folder / "shards").glob("*.stats.json"))
    records = json.loads((folder / "context_stats.json").read_text())["records_out"]
    cuts = sum(json.loads(Path(p).read_text())["cuts"] for p in stats)
    plan = out / "plan.json"
    plan.write_text(json.dumps({"held_out": {"dev+test": records - cuts}}))
    merge_shar_stats(
        stats,
        context_stats=str(folder / "context_stats.json"),
        plan=str(plan),
        stats=str(out / "stats.json"),
        rejected_dir=str(out / "rejected"),
        dataset="emilia",
    )


def job_context_merge(folder: Path, out: Path) -> None:
    from sharflow.context.merge import merge_context

    parts = folder / "context_parts"
    merge_context(
        part_records=sorted(str(p) for p in parts.glob("part-*.records.jsonl")),
        part_rejected=sorted(str(p) for p in parts.glob("part-*.rejected.jsonl")),
        part_stats=sorted(str(p) for p in parts.glob("part-*.stats.json")),
        records_stats=str(parts / "records_stats.json"),
        with_context=str(out / "with_context.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
    )


def job_quality_merge(folder: Path, out: Path) -> None:
    from sharflow.quality.merge import merge_quality

    quality = folder / "quality"
    merge_quality(
        part_metrics=sorted(str(p) for p in quality.glob("part-*[0-9].jsonl")),
        part_stats=sorted(str(p) for p in quality.glob("part-*.stats.json")),
        records_stats=str(quality / "records_stats.json"),
        metrics=str(out / "metrics.jsonl"),
        stats=str(out / "stats.json"),
    )


def job_quality_filter(folder: Path, out: Path) -> None:
    from sharflow.quality.filter import filter_quality

    quality = folder / "quality"
    filter_quality(
        records=str(quality / "records.jsonl"),
        metrics=str(quality / "metrics.jsonl"),
        records_stats=str(quality / "records_stats.json"),
        kept=str(out / "kept.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        filters={"speech_ratio": {"min": 0.5}, "dnsmos_ovrl": {"min": 2.5}},
        action="drop",
        dataset="emilia",
    )


def job_codes_merge(folder: Path, out: Path) -> None:
    from sharflow.codes.merge import merge_codes_stats

    merge_codes_stats(
        sorted(str(p) for p in (folder / "shards").glob("*.codes.json")), str(out / "stats.json")
    )


def job_input_cfg(folder: Path, out: Path) -> None:
    from sharflow.dataset.training import write_input_cfg

    shards = len(list((folder / "shards").glob("*.stats.json")))
    plan = out / "shard_plan.json"  # the train set's generations: what the entries' shard ranges name
    write_plan(plan, shards)
    dataset = {"shar_dir": str(out / "shar"), "plan": str(plan), "catalog": str(folder / "catalog.parquet")}
    write_input_cfg(
        {"emilia": dataset},
        str(out / "input_cfg.yaml"),
        codec="codec",
        num_buckets=8,
        settings={"shuffle": True, "shard_seed": "randomized"},
    )


def job_text_merge(folder: Path, out: Path) -> None:
    from sharflow.core.layout import TextPartFiles
    from sharflow.text.fields import TextSettings
    from sharflow.text.job import merge_text

    parts = folder / "text_parts"
    merge_text(
        [
            TextPartFiles(f"{prefix}.jsonl", f"{prefix}.rejected", f"{prefix}.stats.json")
            for prefix in (str(parts / f"part-{p:04d}") for p in range(TEXT_PARTS))
        ],
        records_stats=str(parts / "prepare_stats.json"),
        out_records=str(out / "records.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="emilia",
        settings=TextSettings(),
    )


def job_splits(folder: Path, out: Path) -> None:
    from sharflow.splits.stage import DatasetSplits, assign_splits

    rules = IDENTITY_SPLITS
    identity = folder / "identity"
    assign_splits(
        "emilia",
        DatasetSplits(str(identity / "records.jsonl"), str(folder), rules),
        links=str(identity / "links.jsonl"),
        identity=sorted(str(p) for p in identity.glob("part-*.jsonl")),
        records_in=json.loads((folder / "quality" / "records_stats.json").read_text())["records_out"],
        out_records=str(out / "records.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
    )


def identity_datasets(folder: Path) -> dict:
    from sharflow.identity.links import DatasetIdentity

    prints = folder / "fingerprints"
    parts = [
        [str(prints / f"part-{p:04d}.jsonl"), str(prints / f"part-{p:04d}.npy")] for p in range(CONTEXT_PARTS)
    ]
    return {"emilia": DatasetIdentity(parts, IDENTITY_SPLITS)}


def job_identity_index(folder: Path, out: Path) -> None:
    from sharflow.core.layout import IdentityIndexFiles
    from sharflow.identity.links import MatchRules, index_identities

    files = IdentityIndexFiles.under(out)
    index_identities(identity_datasets(folder), rules=MatchRules(), out=files)


def identity_index(folder: Path):
    """The index job's files for `folder`'s corpus (made by make_inputs with the job's own code)."""
    from sharflow.core.layout import IdentityIndexFiles

    index = folder / "identity_index"
    return IdentityIndexFiles.under(index)


def write_identity_checks(folder: Path) -> None:
    """The identity index (by the index job's own code) and what IDENTITY_CHECKS check parts leave
    for the merge: each an equal share of the train records, one in 100 of them linked."""
    from sharflow.identity.links import SAME_CONTENT, _Tally

    index = identity_index(folder)
    Path(index.summary).parent.mkdir(exist_ok=True)
    job_identity_index(folder, Path(index.summary).parent)
    train = sum(json.loads(Path(index.summary).read_text())["train_checked"].values())
    checks = folder / "identity_checks"
    checks.mkdir(exist_ok=True)
    bounds = np.linspace(0, train, IDENTITY_CHECKS + 1).astype(int)
    for p in range(IDENTITY_CHECKS):
        tally = _Tally()
        with open(checks / f"{p}.jsonl", "w", encoding="utf-8") as f:
            for n in range(int(bounds[p]), int(bounds[p + 1]), 100):
                where = {
                    "audio_filepath": f"audio/{n % CONTAINERS:06d}.flac",
                    "offset": 30.0 * n,
                    "duration": 8.0,
                }
                row = {"dataset": "emilia", **where, "reason": SAME_CONTENT, "score": 0.5}
                row["matched"] = {"dataset": "emilia", **where, "offset": 1.0, "split": "dev"}
                f.write(json.dumps(row) + "\n")
                tally.add(row)
        first, records = int(bounds[p]), int(bounds[p + 1] - bounds[p])
        stats = {"part": p, "parts": IDENTITY_CHECKS, "first": first, "records": records, **tally.state()}
        (checks / f"{p}.stats.json").write_text(json.dumps({**stats, "seconds": 1.0}))


CHECK_RECORDS = 100_000  # train records a measured identity check part holds, about: the corpus in such parts


def job_identity_check(folder: Path, out: Path) -> dict:
    """The first of the check parts of about CHECK_RECORDS train records each (one part up to 10^5
    records, ten at 10^6), as the workflow runs them (identity.check_parts): each loads the whole
    index and looks its records up. The lookups' cost per record as the corpus (and so its
    held-out set) grows; {"share": the share of the corpus's records it checked}."""
    from sharflow.core.layout import IdentityCheckFiles
    from sharflow.identity.links import MatchRules, check_identities

    train = sum(json.loads(Path(identity_index(folder).summary).read_text())["train_checked"].values())
    stats = check_identities(
        identity_datasets(folder),
        index=identity_index(folder),
        part=0,
        parts=max(1, round(train / CHECK_RECORDS)),
        rules=MatchRules(),
        out=IdentityCheckFiles(str(out / "links.jsonl"), str(out / "stats.json")),
    )
    return {"share": stats["records"] / train}


def planted_found(folder: Path, out: Path) -> dict:
    """After job_identity_check (not timed): {planted, found}, the planted copies of held-out records
    (write_fingerprints) among the train records its part checked, and how many of them it linked to
    their original."""
    from sharflow.core.splits import TRAIN
    from sharflow.identity.links import SAME_CONTENT, _Records

    part = json.loads((out / "stats.json").read_text())
    checked, n = set(), -1
    for _, entry, _, split, _ in _Records(identity_datasets(folder)):
        n += split == TRAIN
        if split == TRAIN and part["first"] <= n < part["first"] + part["records"]:
            checked.add((entry["audio_filepath"], entry["offset"]))
    with open(folder / "fingerprints" / "planted.jsonl", encoding="utf-8") as f:
        planted = {(c["copy"]["audio_filepath"], c["copy"]["offset"]): c["of"] for c in map(json.loads, f)}
    planted = {where: of for where, of in planted.items() if where in checked}
    found = 0
    with open(out / "links.jsonl", encoding="utf-8") as f:
        for row in map(json.loads, f):
            of = planted.get((row["audio_filepath"], row["offset"]))
            matched = {k: row.get("matched", {}).get(k) for k in ("audio_filepath", "offset")}
            found += row["reason"] == SAME_CONTENT and of == matched
    return {"planted": len(planted), "found": found}


def job_identity_merge(folder: Path, out: Path) -> None:
    from sharflow.core.layout import IdentityCheckFiles
    from sharflow.identity.links import MatchRules, merge_identities

    checks = folder / "identity_checks"
    merge_identities(
        identity_index(folder).summary,
        [
            IdentityCheckFiles(str(checks / f"{p}.jsonl"), str(checks / f"{p}.stats.json"))
            for p in range(IDENTITY_CHECKS)
        ],
        rules=MatchRules(),
        out_links=str(out / "links.jsonl"),
        out_stats=str(out / "stats.json"),
    )


def job_calibration_sample(folder: Path, out: Path) -> None:
    """The cost plan's sample as its job draws it (workflow_scripts/calibration_sample.py): whole
    speakers from the records, then a quarter of that, and their summary."""
    from sharflow.plan.sample import draw_sample

    size, seed = CALIBRATION, 0
    sample = draw_sample(str(folder / "with_context.jsonl"), str(out / "sample.jsonl"), size, seed)
    small = draw_sample(str(out / "sample.jsonl"), str(out / "small.jsonl"), size // 4, seed, cap=size // 4)
    (out / "summary.json").write_text(json.dumps({**sample.as_dict(), **small.as_small()}))


def job_dataset_card(folder: Path, out: Path) -> None:
    from sharflow.dataset.tables import write_dataset_card

    card = folder / "card"
    write_dataset_card(
        "emilia",
        catalog=str(card / "catalog.parquet"),
        buckets=str(card / "buckets.yaml"),
        verify=str(card / "verify.json"),
        out=str(out / "DATASET.md"),
    )


def job_validation_ds(folder: Path, out: Path) -> None:
    from sharflow.dataset.training import write_input_cfg

    shards = len(list((folder / "shards").glob("*.stats.json")))
    plan = out / "shard_plan.json"  # as input_cfg, for the held-out sets' Shar
    write_plan(plan, shards)
    dataset = {
        "shar_dir": str(out / "shar"),
        "plan": str(plan),
        "catalog": str(folder / "catalog.parquet"),
        "split": "dev",
    }
    write_input_cfg(
        {"emilia": dataset},
        str(out / "validation_ds.yaml"),
        codec="codec",
        num_buckets=0,  # as the validation_ds rule: no bins for a validation loader
        settings={"shuffle": False},
        use="model.validation_ds",
    )


def job_evaluation_set(folder: Path, out: Path) -> None:
    """The test split's evaluation set: every cut's target and context audio out of the Shar as WAV
    files, and the manifest MagpieTTS's evaluation reads."""
    from sharflow.dataset.evaluation import export_evaluation_set

    export_evaluation_set(
        "emilia_test", shar_dir=str(folder / "evaluation" / "shar"), out_dir=str(out / "set")
    )


def job_verify(folder: Path, out: Path) -> None:
    """verify over the train split's Shar: every shard's fields opened and their members checked (in
    this process: workers 1, where its CPU is counted), the catalog along them, the totals."""
    from sharflow.verify.dataset import verify_dataset

    root = folder / "verify"
    verify_dataset(
        "emilia",
        shar_dir=str(root / "shar"),
        plan=str(root / "plan.json"),
        shar_stats=str(root / "shar_stats.json"),
        codes_stats={"codec": str(root / "codes_stats.json")},
        catalog=str(root / "catalog.parquet"),
        out=str(out / "verify.json"),
        workers=1,
    )


def job_report(folder: Path, out: Path) -> None:
    """The run report over the dataset: its plots, summary, quality view and tables."""
    from sharflow.report.report import write_report

    write_report({"emilia": report_files(folder)}, str(out), min_similarity=0.6)


JOBS = {
    "prepare": job_prepare,
    "text_merge": job_text_merge,
    "splits": job_splits,
    "context_plan": job_context_plan,
    "shar_plan": job_shar_plan,
    "buckets": job_buckets,
    "catalog": job_catalog,
    "shar_merge": job_shar_merge,
    "context_merge": job_context_merge,
    "quality_merge": job_quality_merge,
    "quality_filter": job_quality_filter,
    "codes_merge": job_codes_merge,
    "input_cfg": job_input_cfg,
    "validation_ds": job_validation_ds,
    "dataset_card": job_dataset_card,
    "calibration_sample": job_calibration_sample,
    "identity_index": job_identity_index,
    "identity_check": job_identity_check,
    "identity_merge": job_identity_merge,
    "evaluation_set": job_evaluation_set,
    "verify": job_verify,
    "report": job_report,
}
