"""What the report reads: every stats file of a dataset, records and hours through every stage, rejects
by stage and reason, and the duration histogram streamed from the catalog."""

from dataclasses import dataclass

import numpy as np
import yaml

from sharflow.core.atomic import read_json
from sharflow.dataset.catalog import iter_batches

HIST_BINS = 400  # duration histogram resolution (CDF steps) between 0 and the longest cut
COLUMNS = ("stage", "dataset", "records_in", "records_out", "rejected", "hours_in", "hours_out")


@dataclass
class DatasetStats:
    """Every stats file of one dataset, loaded."""

    name: str
    prepare: dict
    text: dict
    context: dict
    shar: dict
    codes: dict[str, dict]
    buckets: dict
    verify: dict
    catalog: str = ""
    quality: dict | None = None  # the quality filter's stats; None when the stage is off
    records: str = ""  # the text stage's records (what the quality metrics are measured on)
    quality_metrics: str = ""
    splits: dict | None = None  # the splits job's stats; None without splits
    identity: dict | None = None  # the identity job's stats (every dataset's); None without it
    segment: dict | None = None  # a long_form dataset's segment stats (sharflow.segment)


def load_dataset(name: str, files: dict) -> DatasetStats:
    """`files`: prepare, text, context, shar, verify (json), buckets (yaml), codes {codec: json},
    catalog; with the quality stage on, also quality (the filter's stats), records and quality_metrics;
    with splits, splits (the splits job's stats) and identity (the identity job's); for a long_form
    dataset, segment (the segment stage's)."""
    with open(files["buckets"], encoding="utf-8") as f:
        buckets = yaml.safe_load(f)
    return DatasetStats(
        name=name,
        quality=read_json(files["quality"]) if files.get("quality") else None,
        records=files.get("records", ""),
        quality_metrics=files.get("quality_metrics", ""),
        prepare=read_json(files["prepare"]),
        text=read_json(files["text"]),
        context=read_json(files["context"]),
        shar=read_json(files["shar"]),
        codes={codec: read_json(path) for codec, path in sorted(files["codes"].items())},
        buckets=buckets,
        verify=read_json(files["verify"]),
        catalog=files["catalog"],
        splits=read_json(files["splits"]) if files.get("splits") else None,
        identity=read_json(files["identity"]) if files.get("identity") else None,
        segment=read_json(files["segment"]) if files.get("segment") else None,
    )


def summary_rows(ds: DatasetStats) -> list[dict]:
    """Records and hours into and out of every stage (codes: target + context audio encoded)."""
    p, t, q, c, s, v = ds.prepare, ds.text, ds.quality, ds.context, ds.shar, ds.verify

    def counted(stage: str, stats: dict, hours_in: float) -> tuple:
        return (
            stage,
            stats["records_in"],
            stats["records_out"],
            stats["rejected_total"],
            hours_in,
            stats["hours_out"],
        )

    rows = [counted("prepare", p, p["hours_in"]), counted("text", t, t["hours_in"])]
    if q:
        rows.append(counted("quality", q, q["hours_in"]))
    if ds.splits:
        rows.append(counted("splits", ds.splits, ds.splits["hours_in"]))
    # with splits, the dataset's Shar is train: its hours in are the context stage's train hours
    shar_in = c["splits"]["train"]["hours_out"] if "splits" in c else c["hours_out"]
    rows += [
        counted("context", c, (ds.splits or q or t)["hours_out"]),
        ("shar", s["records_in"], s["cuts"], s["rejected_total"], shar_in, s["hours"]),
    ]
    for codec, k in ds.codes.items():
        rows.append(
            (
                f"codes {codec} (target+context audio)",
                s["cuts"],
                k["cuts"],
                s["cuts"] - k["cuts"],
                round(s["hours"] + s["context_hours"], 6),
                k["audio_hours"],
            )
        )
    rows.append(("verify", s["cuts"], v["cuts"], s["cuts"] - v["cuts"], s["hours"], v["hours"]))
    return [dict(zip(COLUMNS, (stage, ds.name, *rest), strict=True)) for stage, *rest in rows]


def rejected_by_reason(ds: DatasetStats) -> dict[tuple[str, str], int]:
    out = {}
    stages = (
        ("prepare", ds.prepare),
        ("text", ds.text),
        ("quality", ds.quality),
        ("splits", ds.splits),
        ("context", ds.context),
        ("shar", ds.shar),
    )
    for stage, stats in stages:
        for reason, n in sorted(stats["rejected"].items()) if stats else ():
            out[(stage, reason)] = n
    return out


def duration_histogram(catalog: str, max_duration: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(edges, cut counts, seconds) per bin over [0, max_duration], streamed from the catalog."""
    edges = np.linspace(0.0, max(max_duration, 1e-3) * (1 + 1e-9), HIST_BINS + 1)
    counts = np.zeros(HIST_BINS, dtype=np.int64)
    seconds = np.zeros(HIST_BINS)
    for batch in iter_batches(catalog, ["duration"]):
        d = batch.column(0).to_numpy()
        idx = np.clip(np.searchsorted(edges, d, side="right") - 1, 0, HIST_BINS - 1)
        np.add.at(counts, idx, 1)
        np.add.at(seconds, idx, d)
    return edges, counts, seconds
