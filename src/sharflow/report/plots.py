"""The report's plots (PNG, fixed metadata: the same data gives the same bytes)."""

import numpy as np

from sharflow.core.atomic import atomic_file
from sharflow.core.metrics import FILTERABLE, SIDES
from sharflow.report.quality_costs import QualityView
from sharflow.report.stats import HIST_BINS, DatasetStats, rejected_by_reason


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
                "text": "tab:cyan",
                "quality": "tab:olive",
                "splits": "tab:red",
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


def plot_text(datasets: list[DatasetStats], path: str) -> None:
    """Per dataset: where normalized_text came from, and the symbols the cuts' tokenizers skip most."""
    fig, axes = _grid(len(datasets), 2, 11, 3.2)
    for (left, right), ds in zip(axes, datasets, strict=True):
        t = ds.text
        sources = t["normalized_text_source"]
        left.barh(list(sources), list(sources.values()), color="tab:cyan")
        for y, n in enumerate(sources.values()):
            left.text(n, y, f" {n}", va="center")
        left.set_xlabel("records")
        left.set_title(f"{ds.name}: normalized_text from ({t['symbols_left']} with symbols left)", fontsize=9)
        dropped, cov = t["dropped_symbols"], t["coverage"]
        title = (
            f"{ds.name}: not measured: {cov['unmeasured']}; of {cov['measured']} measured, "
            if cov["unmeasured"]
            else f"{ds.name}: "
        ) + f"{cov['records_dropping']} records lose {cov['symbols_dropped']} symbols to the tokenizer"
        if dropped:
            labels = [repr(s) for s in list(dropped)[:15]]
            right.barh(labels, list(dropped.values())[:15], color="tab:red")
            right.invert_yaxis()
            right.set_xlabel("times skipped")
        else:
            right.text(0.5, 0.5, "nothing skipped", ha="center", va="center", fontsize=12)
            right.set_axis_off()
        right.set_title(title, fontsize=9)
    _save(fig, path)
