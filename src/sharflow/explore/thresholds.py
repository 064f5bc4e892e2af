"""One metric's threshold, moved by the user: the hours on each side, the cuts nearest it, the config line.

Over a dataset's table (its kept cuts and the records the quality filter dropped), a threshold on side
`min` keeps a cut whose value is at least the threshold, on side `max` one at most it, as the quality
filter judges (sharflow.quality.filter.failures); a cut without a value is kept only for a metric
whose null passes. Everything is one pass over two columns: a million rows take milliseconds.
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sharflow.core.metrics import METRICS
from sharflow.explore.query import ORDER

BINS = 60
NEAREST = 5
BY_NAME = {m.name: m for m in METRICS}


@dataclass(frozen=True)
class Threshold:
    """What a threshold does to a table: hours kept and dropped (and of no value), a histogram in
    hours, the rows nearest it on each side (nearest first) and the line to paste into the config."""

    metric: str
    side: str
    value: float
    hours_kept: float
    hours_dropped: float
    hours_null: float
    edges: list[float]
    hours: list[float]
    below: list[int]  # ORDER of the rows just below the threshold
    above: list[int]  # ORDER of the rows at or just above it
    config_line: str


def metrics_of(table: pa.Table) -> list[str]:
    """The registry's metrics the table has a column of, with at least one value."""
    return [
        m.name for m in METRICS if m.name in table.schema.names and table[m.name].null_count < table.num_rows
    ]


def threshold(table: pa.Table, metric: str, value: float | None = None, side: str | None = None) -> Threshold:
    """The threshold `value` (default: the median) on `side` (default: the metric's usual side) of
    `metric` over `table` (which has `duration` and ORDER columns)."""
    known = BY_NAME[metric]
    side = side or known.sides[0]
    if side not in ("min", "max"):
        raise ValueError(f"side is min or max, not {side!r}")
    # compared in the column's own precision: a float32 score of 4.4 is the filter's 4.4, not 4.4000001
    values = table[metric].to_numpy(zero_copy_only=False)
    values = values.astype(values.dtype if values.dtype.kind == "f" else np.float64)
    hours = table["duration"].to_numpy(zero_copy_only=False).astype(np.float64) / 3600
    present = ~np.isnan(values)
    if value is None:
        value = float(np.median(values[present])) if present.any() else 0.0
    bound = values.dtype.type(value)
    passes = values >= bound if side == "min" else values <= bound
    kept = present & passes
    null_hours = float(hours[~present].sum())
    edges, counts = _histogram(values[present].astype(np.float64), hours[present])
    below, above = _nearest(values, table[ORDER].to_numpy(), bound, present)
    return Threshold(
        metric=metric,
        side=side,
        value=value,
        hours_kept=float(hours[kept].sum()) + (null_hours if known.null_passes else 0.0),
        hours_dropped=float(hours[present & ~passes].sum()) + (0.0 if known.null_passes else null_hours),
        hours_null=null_hours,
        edges=edges,
        hours=counts,
        below=below,
        above=above,
        config_line=f"quality:\n  filters:\n    {metric}: {{{side}: {_short(value)}}}",
    )


def _histogram(values: np.ndarray, hours: np.ndarray) -> tuple[list[float], list[float]]:
    if not len(values):
        return [], []
    low, high = float(values.min()), float(values.max())
    if high <= low:
        high = low + 1.0
    counts, edges = np.histogram(values, bins=BINS, range=(low, high), weights=hours)
    return edges.tolist(), counts.tolist()


def _nearest(values: np.ndarray, order: np.ndarray, value: float, present: np.ndarray):
    """ORDER of the NEAREST rows below `value` and at or above it, nearest first (ties by order)."""
    out = []
    for side in (present & (values < value), present & (values >= value)):
        rows = np.flatnonzero(side)
        distance = np.abs(values[rows] - value)
        pick = rows[np.lexsort((order[rows], distance))[:NEAREST]]
        out.append([int(order[i]) for i in pick])
    return out


def _short(value: float) -> str:
    return f"{value:.6g}"
