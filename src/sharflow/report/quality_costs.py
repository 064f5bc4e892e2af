"""What the quality thresholds cost: metric histograms, hours kept vs threshold, hours removed per filter.

Streams a dataset's records (the text stage's) and their metrics in step (one line each, as the filter
reads them) twice: once for each metric's range, once for fixed-bin histograms of audio seconds,
so memory does not grow with the dataset. The table of hours removed is exact (every record
checked against the filters the quality_filter job used, taken from its stats); the curves are
read off the histograms (bin resolution). A record whose audio could not be decoded counts in
no histogram; a metric that could not be measured (null) fails every threshold on it.
"""

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sharflow.core.metrics import FILTERABLE, MEASURED, TEXT_METRICS
from sharflow.quality.filter import failures, in_step

BINS = 60


@dataclass
class MetricHistogram:
    """Audio seconds per value bin of one metric, and the seconds where it was null."""

    edges: np.ndarray
    seconds: np.ndarray
    null_seconds: float = 0.0

    def kept_hours(self, side: str) -> np.ndarray:
        """Hours a threshold at each edge keeps: `min` keeps values >= edge, `max` values <= edge."""
        if side == "min":
            kept = np.concatenate([np.cumsum(self.seconds[::-1])[::-1], [0.0]])
        else:
            kept = np.concatenate([[0.0], np.cumsum(self.seconds)])
        return kept / 3600


@dataclass
class QualityView:
    """One dataset's quality figures for the report."""

    dataset: str
    filters: dict
    action: str
    hours_measured: float
    histograms: dict[str, MetricHistogram] = field(default_factory=dict)
    removed: list[dict] = field(default_factory=list)


def _measured(records: str, metrics: str):
    """(duration, metrics or None when the audio was unreadable) of every record."""
    for _, raw, m in in_step(records, metrics):
        yield json.loads(raw)["duration"], (None if "error" in m else m)


def quality_view(dataset: str, records: str, metrics: str, stats: dict, bins: int = BINS) -> QualityView:
    """Histograms of every metric and the hours each filter (alone, and all together) removes."""
    filters, lo, hi, asr = stats["filters"], {}, {}, False
    for _, m in _measured(records, metrics):
        asr = asr or bool(m and "cer" in m)
        for name in FILTERABLE if m else ():
            if m.get(name) is not None:
                lo[name] = min(lo.get(name, m[name]), m[name])
                hi[name] = max(hi.get(name, m[name]), m[name])
    hists = {}
    for name in FILTERABLE if asr else MEASURED + TEXT_METRICS:
        a, b = lo.get(name, 0.0), hi.get(name, 1.0)
        edges = np.linspace(a, b if b > a else a + 1.0, bins + 1)
        hists[name] = MetricHistogram(edges, np.zeros(bins))
    fail_alone = dict.fromkeys(filters, 0.0)
    fail_alone_n = dict.fromkeys(filters, 0)
    fail_any = measured = unreadable = 0.0
    fail_any_n = unreadable_n = 0
    for duration, m in _measured(records, metrics):
        if m is None:
            unreadable += duration
            unreadable_n += 1
            continue
        measured += duration
        for name, h in hists.items():
            if m.get(name) is None:
                h.null_seconds += duration
                continue
            i = min(bins - 1, int(np.searchsorted(h.edges, m[name], side="right")) - 1)
            h.seconds[i] += duration
        failed = {metric for metric, _ in failures(m, filters)}
        for metric in failed:
            fail_alone[metric] += duration
            fail_alone_n[metric] += 1
        if failed:
            fail_any += duration
            fail_any_n += 1
    rows = [
        (f"{metric} {_bounds(bounds)}", fail_alone_n[metric], fail_alone[metric])
        for metric, bounds in filters.items()
    ]
    rows += [
        ("all filters together", fail_any_n, fail_any),
        ("unreadable audio (always rejected)", unreadable_n, unreadable),
    ]
    removed = [
        {
            "dataset": dataset,
            "filter": name,
            "records": n,
            "hours": round(seconds / 3600, 6),
            "share_of_hours": round(seconds / (measured + unreadable), 6) if measured + unreadable else 0.0,
        }
        for name, n, seconds in rows
    ]
    return QualityView(dataset, filters, stats["action"], measured / 3600, hists, removed)


def _bounds(bounds: dict) -> str:
    """A filter's bounds as people write them: `>= x`, `<= y` or `in [x, y]`."""
    if len(bounds) == 2:
        return f"in [{bounds['min']}, {bounds['max']}]"
    return f">= {bounds['min']}" if "min" in bounds else f"<= {bounds['max']}"


def removed_table(views: list[QualityView]) -> pd.DataFrame:
    return pd.DataFrame(
        [row for v in views for row in v.removed],
        columns=["dataset", "filter", "records", "hours", "share_of_hours"],
    )
