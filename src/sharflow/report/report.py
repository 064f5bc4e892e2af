"""The run report: a summary table and plots from every stage's stats (results/report/).

Everything comes from the stats files the stages write and from each dataset's catalog (streamed
into fixed histograms, or aggregated a batch at a time by sharflow.dataset.tables), so the report job's
memory does not grow with the dataset. The plots are PNGs flagged for `snakemake --report`;
summary.html is the table the report shows (summary.tsv the same for scripts), tables.html the
per-speaker and per-bucket tables (speakers.tsv, buckets.tsv in full).
"""

import html
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from sharflow.core.atomic import atomic_file, read_json
from sharflow.core.metrics import FILTERABLE, SIDES
from sharflow.dataset.catalog import iter_batches
from sharflow.dataset.tables import bucket_occupancy, speaker_table
from sharflow.report.quality_costs import QualityView, quality_view, removed_table

log = logging.getLogger(__name__)

HIST_BINS = 400  # duration histogram resolution (CDF steps) between 0 and the longest cut
SHOWN_SPEAKERS = 50  # speakers in tables.html; speakers.tsv has all
COLUMNS = ("stage", "dataset", "records_in", "records_out", "rejected", "hours_in", "hours_out")


@dataclass
class DatasetStats:
    """Every stats file of one dataset, loaded."""

    name: str
    prepare: dict
    context: dict
    shar: dict
    codes: dict[str, dict]
    buckets: dict
    verify: dict
    catalog: str = ""
    quality: dict | None = None  # the quality filter's stats; None when the stage is off
    prepared: str = ""
    quality_metrics: str = ""


def load_dataset(name: str, files: dict) -> DatasetStats:
    """`files`: prepare, context, shar, verify (json), buckets (yaml), codes {codec: json}, catalog;
    with the quality stage on, also quality (the filter's stats), prepared and quality_metrics."""
    with open(files["buckets"], encoding="utf-8") as f:
        buckets = yaml.safe_load(f)
    return DatasetStats(
        name=name,
        quality=read_json(files["quality"]) if files.get("quality") else None,
        prepared=files.get("prepared", ""),
        quality_metrics=files.get("quality_metrics", ""),
        prepare=read_json(files["prepare"]),
        context=read_json(files["context"]),
        shar=read_json(files["shar"]),
        codes={codec: read_json(path) for codec, path in sorted(files["codes"].items())},
        buckets=buckets,
        verify=read_json(files["verify"]),
        catalog=files["catalog"],
    )


def summary_rows(ds: DatasetStats) -> list[dict]:
    """Records and hours into and out of every stage (codes: target + context audio encoded)."""
    p, q, c, s, v = ds.prepare, ds.quality, ds.context, ds.shar, ds.verify

    def counted(stage: str, stats: dict, hours_in: float) -> tuple:
        return (
            stage,
            stats["records_in"],
            stats["records_out"],
            stats["rejected_total"],
            hours_in,
            stats["hours_out"],
        )

    rows = [counted("prepare", p, p["hours_in"])]
    if q:
        rows.append(counted("quality", q, q["hours_in"]))
    rows += [
        counted("context", c, (q or p)["hours_out"]),
        ("shar", s["records_in"], s["cuts"], s["rejected_total"], c["hours_out"], s["hours"]),
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
    stages = (("prepare", ds.prepare), ("quality", ds.quality), ("context", ds.context), ("shar", ds.shar))
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


# ---- plots --------------------------------------------------------------------------------------


def _grid(rows: int, columns: int, width: float, row_height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=(width, row_height * rows), squeeze=False)


def _figure(n_panels: int, height: float = 3.2):
    fig, axes = _grid(n_panels, 1, 8, height)
    return fig, axes[:, 0]


def _save(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_file(path, "wb") as f:
        # fixed metadata: the same data gives the same PNG bytes
        fig.savefig(f, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)


def plot_durations(datasets: list[DatasetStats], histograms: dict, path: str) -> None:
    fig, axes = _figure(len(datasets))
    for ax, ds in zip(axes, datasets, strict=True):
        edges, counts, seconds = histograms[ds.name]
        # coarser bars than the CDF's resolution, so the shape reads at a glance
        step = max(1, HIST_BINS // 50)
        ax.bar(
            edges[:-1:step],
            np.add.reduceat(counts, np.arange(0, HIST_BINS, step)),
            width=edges[step] - edges[0],
            align="edge",
            color="tab:blue",
            edgecolor="white",
        )
        ax.set_title(f"{ds.name}: {int(counts.sum())} cuts, {seconds.sum() / 3600:.3f} h")
        ax.set_xlabel("cut duration (s)")
        ax.set_ylabel("cuts")
    _save(fig, path)


def plot_similarity(datasets: list[DatasetStats], min_similarity: float, path: str) -> None:
    fig, axes = _figure(len(datasets))
    for ax, ds in zip(axes, datasets, strict=True):
        hist = ds.context["similarity_histogram"]
        edges, counts = np.asarray(hist["edges"]), np.asarray(hist["counts"])
        ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color="tab:green", edgecolor="white")
        ax.axvline(min_similarity, color="tab:red", linestyle="--", label=f"min_similarity {min_similarity}")
        ax.set_title(f"{ds.name}: speaker similarity of target and chosen context ({int(counts.sum())} cuts)")
        ax.set_xlabel("cosine similarity")
        ax.set_ylabel("cuts")
        ax.legend(loc="upper left")
    _save(fig, path)


def plot_rejects(datasets: list[DatasetStats], path: str) -> None:
    fig, axes = _figure(len(datasets))
    for ax, ds in zip(axes, datasets, strict=True):
        rejected = rejected_by_reason(ds)
        if not rejected:
            ax.text(0.5, 0.5, "no records rejected", ha="center", va="center", fontsize=14)
            ax.set_axis_off()
        else:
            labels = [f"{stage}: {reason}" for stage, reason in rejected]
            colors = {
                "prepare": "tab:orange",
                "quality": "tab:olive",
                "context": "tab:purple",
                "shar": "tab:brown",
            }
            ax.barh(labels, list(rejected.values()), color=[colors[s] for s, _ in rejected])
            ax.invert_yaxis()
            ax.set_xlabel("records rejected")
            for y, n in enumerate(rejected.values()):
                ax.text(n, y, f" {n}", va="center")
        ax.set_title(f"{ds.name}: {sum(rejected.values())} of {ds.prepare['records_in']} records rejected")
    _save(fig, path)


def plot_load(datasets: list[DatasetStats], path: str) -> None:
    """Context stage: each part's and rank's share of the planned cost vs its share of the time."""
    fig, axes = _figure(len(datasets), height=3.6)
    for ax, ds in zip(axes, datasets, strict=True):
        labels, planned, actual = [], [], []
        for part in ds.context["parts"]:
            for rank in part["ranks"]:
                labels.append(f"p{part['part']} r{rank['rank']}")
                planned.append(rank["planned_cost"])
                actual.append(rank["seconds"])
        planned_share = np.asarray(planned) / max(sum(planned), 1e-12)
        actual_share = np.asarray(actual) / max(sum(actual), 1e-12)
        x = np.arange(len(labels))
        ax.bar(x - 0.2, planned_share, 0.4, label="planned (cost model)", color="tab:gray")
        ax.bar(x + 0.2, actual_share, 0.4, label="actual (seconds)", color="tab:blue")
        ax.set_xticks(x, labels, rotation=45 if len(labels) > 12 else 0)
        ax.set_ylabel("share of the stage")
        ax.set_title(f"{ds.name}: context load per part (p) and rank (r)")
        ax.legend()
    _save(fig, path)


def plot_buckets(datasets: list[DatasetStats], histograms: dict, path: str) -> None:
    """Duration-weighted CDF with the bucket boundaries: equal-duration buckets are equal steps."""
    fig, axes = _figure(len(datasets))
    for ax, ds in zip(axes, datasets, strict=True):
        edges, _, seconds = histograms[ds.name]
        cdf = np.concatenate([[0.0], np.cumsum(seconds)]) / max(seconds.sum(), 1e-12)
        ax.plot(edges, cdf, color="tab:blue", label="share of total audio ≤ duration")
        for b in ds.buckets["bucket_duration_bins"]:
            ax.axvline(b, color="tab:red", linewidth=0.8)
        ax.set_title(f"{ds.name}: {ds.buckets['num_buckets']} buckets (red: bucket_duration_bins)")
        ax.set_xlabel("cut duration (s)")
        ax.set_ylabel("cumulative share")
        ax.legend(loc="upper left")
    _save(fig, path)


def _quality_panels(views: list[QualityView]):
    """A figure with, per dataset, one panel per metric in two columns; and (axis, view, metric) of each."""
    names = [m for m in FILTERABLE if any(m in v.histograms for v in views)]
    rows = (len(names) + 1) // 2
    fig, axes = _grid(rows * len(views) or 1, 2, 9, 2.2)
    if not views:
        for ax in axes.flat:
            ax.set_axis_off()
        axes[0, 0].text(0, 0.5, "quality stage off (quality.enabled: false)", fontsize=12)
    flat = axes.reshape(max(1, len(views)), -1)  # one row of panels per dataset (one blank without)
    for row in flat:
        for ax in row[len(names) :]:
            ax.set_axis_off()
    panels = []
    for row, view in zip(flat, views, strict=False):
        for ax, metric in zip(row, names, strict=False):
            if metric in view.histograms:
                panels.append((ax, view, metric))
            else:  # not measured for this dataset (no ASR check)
                ax.set_axis_off()
    return fig, panels


def _thresholds(ax, view: QualityView, metric: str) -> None:
    for side, value in sorted(view.filters.get(metric, {}).items()):
        ax.axvline(value, color="tab:red", linestyle="--", linewidth=1.2, label=f"{side} {value}")


def plot_quality(views: list[QualityView], path: str) -> None:
    """Per dataset and metric: hours of audio per value bin, the configured thresholds in red."""
    fig, panels = _quality_panels(views)
    for ax, view, metric in panels:
        h = view.histograms[metric]
        ax.bar(h.edges[:-1], h.seconds / 3600, width=np.diff(h.edges), align="edge", color="tab:cyan")
        _thresholds(ax, view, metric)
        null = f"; null: {h.null_seconds / 3600:.3f} h" if h.null_seconds else ""
        ax.set_title(f"{view.dataset}: {metric}{null}", fontsize=9)
        ax.set_ylabel("hours", fontsize=8)
        ax.tick_params(labelsize=7)
        if metric in view.filters:
            ax.legend(fontsize=7)
    _save(fig, path)


def plot_quality_kept(views: list[QualityView], path: str) -> None:
    """Per dataset and metric: hours kept if the threshold were x (the filter's sides, else the usual)."""
    fig, panels = _quality_panels(views)
    colours = {"min": "tab:olive", "max": "tab:pink"}
    for ax, view, metric in panels:
        h = view.histograms[metric]
        for side in sorted(view.filters.get(metric, {}), reverse=True) or SIDES[metric]:
            ax.plot(
                h.edges, h.kept_hours(side), color=colours[side], linewidth=2, label=f"kept with {side} = x"
            )
        _thresholds(ax, view, metric)
        ax.set_ylim(0, view.hours_measured * 1.08 or 1.0)
        ax.set_title(f"{view.dataset}: {metric} (of {view.hours_measured:.3f} h measured)", fontsize=9)
        ax.set_ylabel("hours kept", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower left")
    _save(fig, path)


# ---- tables -------------------------------------------------------------------------------------


PAGE_STYLE = """
body { font-family: sans-serif; margin: 1em; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
th, td { border: 1px solid #bbb; padding: 4px 10px; text-align: right; }
th { background: #eee; }
"""


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{PAGE_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def _html_table(frame: pd.DataFrame, floats: str = "{:.4f}") -> str:
    return frame.to_html(index=False, border=0, float_format=floats.format, na_rep="")


def write_summary(rows: list[dict], verify: dict[str, dict], html_path: str, tsv_path: str) -> None:
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    with atomic_file(tsv_path, "w", encoding="utf-8") as f:
        frame.to_csv(f, sep="\t", index=False, lineterminator="\n")
    checks = "".join(
        f"<li>{html.escape(ds)}: {v['shards']} shards × {len(v['fields'])} fields verified, "
        f"{v['cuts']} cuts</li>"
        for ds, v in sorted(verify.items())
    )
    shown = frame.rename(columns=lambda c: c.replace("_", " "))
    body = (
        "<h2>Records and hours through every stage</h2>\n"
        + _html_table(shown)
        + f"\n<h3>Verify</h3><ul>{checks}</ul>"
    )
    with atomic_file(html_path, "w", encoding="utf-8") as f:
        f.write(_page("sharflow summary", body))


def write_tables(datasets: list[DatasetStats], out: Path, shown_speakers: int = SHOWN_SPEAKERS) -> None:
    """tables.html (per-speaker and per-bucket tables of every dataset), speakers.tsv, buckets.tsv."""
    parts, speaker_frames, bucket_frames = [], [], []
    for ds in datasets:
        speakers = speaker_table(ds.catalog)
        one, two = bucket_occupancy(ds.catalog, ds.buckets)
        speaker_frames.append(speakers.assign(dataset=ds.name))
        bucket_frames.append(one.assign(dataset=ds.name))
        more = len(speakers) - shown_speakers
        parts.append(f"<h2>{html.escape(ds.name)}</h2>")
        parts.append(
            f"<h3>Speakers ({len(speakers)}; most hours first"
            + (f", {more} more in speakers.tsv" if more > 0 else "")
            + ")</h3>"
        )
        parts.append(_html_table(speakers.head(shown_speakers)))
        parts.append("<h3>Duration buckets (as lhotse's sampler fills them)</h3>")
        parts.append(_html_table(one))
        if two is not None:
            parts.append("<h3>2D bins (as NeMo's strict 2D bucketing fills them)</h3>")
            parts.append(_html_table(two))
    with atomic_file(out / "tables.html", "w", encoding="utf-8") as f:
        f.write(_page("sharflow tables", "\n".join(parts)))
    for name, frames in (("speakers.tsv", speaker_frames), ("buckets.tsv", bucket_frames)):
        frame = pd.concat(frames, ignore_index=True)
        frame = frame[["dataset", *(c for c in frame.columns if c != "dataset")]]
        with atomic_file(out / name, "w", encoding="utf-8") as f:
            frame.to_csv(f, sep="\t", index=False, lineterminator="\n", float_format="%.6f")


def write_quality_table(views: list[QualityView], html_path: str, tsv_path: str) -> None:
    """Hours each filter removes (drop) or marks failing (mark) alone, and all filters together."""
    frame = removed_table(views)
    with atomic_file(tsv_path, "w", encoding="utf-8") as f:
        frame.to_csv(f, sep="\t", index=False, lineterminator="\n", float_format="%.6f")
    parts = [
        f"<h2>{html.escape(v.dataset)} (action: {html.escape(v.action)}, "
        f"{v.hours_measured:.4f} h measured)</h2>\n" + _html_table(frame[frame.dataset == v.dataset])
        for v in views
    ]
    body = "\n".join(parts) or "<p>The quality stage is off (quality.enabled: false).</p>"
    with atomic_file(html_path, "w", encoding="utf-8") as f:
        f.write(_page("sharflow quality filters", "<h1>Hours each quality filter removes</h1>\n" + body))


def write_report(datasets: dict[str, dict], out_dir: str, *, min_similarity: float) -> list[dict]:
    """All plots and the summary for `datasets` ({name: files, see load_dataset}) into out_dir."""
    loaded = [load_dataset(name, files) for name, files in sorted(datasets.items())]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    histograms = {ds.name: duration_histogram(ds.catalog, ds.buckets["max_duration"]) for ds in loaded}
    out = Path(out_dir)
    plot_durations(loaded, histograms, str(out / "durations.png"))
    plot_similarity(loaded, min_similarity, str(out / "similarity.png"))
    plot_rejects(loaded, str(out / "rejects.png"))
    plot_load(loaded, str(out / "load.png"))
    plot_buckets(loaded, histograms, str(out / "buckets.png"))
    views = [
        quality_view(ds.name, ds.prepared, ds.quality_metrics, ds.quality) for ds in loaded if ds.quality
    ]
    plot_quality(views, str(out / "quality.png"))
    plot_quality_kept(views, str(out / "quality_kept.png"))
    write_quality_table(views, str(out / "quality.html"), str(out / "quality.tsv"))
    rows = [row for ds in loaded for row in summary_rows(ds)]
    write_summary(
        rows, {ds.name: ds.verify for ds in loaded}, str(out / "summary.html"), str(out / "summary.tsv")
    )
    write_tables(loaded, out)
    log.info("report: %d datasets, %d summary rows, plots in %s", len(loaded), len(rows), out_dir)
    return rows
