"""One metric's threshold, moved by the user: the hours on each side, the cuts nearest it, the config line.

Over a dataset's table (its kept cuts and the records the quality filter dropped), a threshold on side
`min` keeps a cut whose value is at least the threshold, on side `max` one at most it, as the quality
filter judges (sharflow.quality.filter.failures); a cut without a value is kept only for a metric
whose null passes. Everything is one pass over two columns: a million rows take milliseconds.

The context speaker similarity is one more threshold, NeMo's rather than sharflow's: its sampler drops a
cut whose `context_speaker_similarity` is below `min_context_speaker_similarity` (a cut without one
passes; sampling.ContextSpeakerSimilarityFilter in NeMo 3.0.0). It is judged over the kept cuts only
(the Shar NeMo reads), starts at NVIDIA's documented 0.6, and says which embedder measured the
similarities, since 0.6 is a number on TitaNet's scale.
"""

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharflow.core.metrics import METRICS
from sharflow.dataset.tables import NEMO_MIN_SIMILARITY, TITANET
from sharflow.explore.query import ORDER
from sharflow.explore.run import KEPT, STATUS

BINS = 60
NEAREST = 5
BY_NAME = {m.name: m for m in METRICS}
SIMILARITY, EMBEDDER = "context_similarity", "context_embedder"  # the catalog's columns


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
    cuts_kept: int
    cuts_dropped: int
    edges: list[float]
    hours: list[float]
    below: list[int]  # ORDER of the rows just below the threshold
    above: list[int]  # ORDER of the rows at or just above it
    config_line: str
    sides: tuple[str, ...] = ("min", "max")
    scale: str | None = None  # what measured the values, where that decides what a number means


def metrics_of(table: pa.Table) -> list[str]:
    """The registry's metrics the table has a column of, with at least one value."""
    return [
        m.name for m in METRICS if m.name in table.schema.names and table[m.name].null_count < table.num_rows
    ]


def thresholdable(table: pa.Table) -> list[str]:
    """The metrics of `table` (metrics_of), then the context speaker similarity when a cut has one."""
    names = metrics_of(table)
    if SIMILARITY in table.schema.names and table[SIMILARITY].null_count < table.num_rows:
        names.append(SIMILARITY)
    return names


def threshold(table: pa.Table, metric: str, value: float | None = None, side: str | None = None) -> Threshold:
    """The threshold `value` (default: the median) on `side` (default: the metric's usual side) of
    `metric` over `table` (which has `duration` and ORDER columns). The context similarity's default
    is NeMo's documented 0.6 and its side is min only, as NeMo's sampler has it."""
    if metric == SIMILARITY:
        return _similarity(table, value, side)
    known = BY_NAME[metric]
    side = side or known.sides[0]
    if side not in ("min", "max"):
        raise ValueError(f"side is min or max, not {side!r}")
    line = f"quality:\n  filters:\n    {metric}: {{{side}: {{value}}}}"
    return _judge(table, metric, value, side, known.null_passes, line)


def _similarity(table: pa.Table, value: float | None, side: str | None) -> Threshold:
    if side not in (None, "min"):
        raise ValueError(
            f"{SIMILARITY} has one side, min: NeMo keeps a cut at or above min_context_speaker_similarity"
        )
    if STATUS in table.schema.names:  # the Shar's cuts: a record the quality filter dropped has none
        table = table.filter(pc.equal(table[STATUS].cast(pa.string()), KEPT))
    value = NEMO_MIN_SIMILARITY if value is None else value
    line = "# NeMo's sampler, in the model's train_ds.dataset (sharflow does not filter on it)\n"
    found = _judge(table, SIMILARITY, value, "min", True, line + "min_context_speaker_similarity: {value}")
    return replace(found, sides=("min",), scale=_scale(table))


def _scale(table: pa.Table) -> str:
    """Which embedder measured the similarities, and whether NeMo's documented 0.6 is on its scale."""
    names = []
    if EMBEDDER in table.schema.names:
        names = sorted(n for n in pc.unique(table[EMBEDDER].cast(pa.string())).to_pylist() if n)
    by = ", ".join(names) or "an embedder the cuts do not name (made before they said it)"
    if names and all(n.startswith(TITANET) for n in names):
        return f"measured by {by}: TitaNet's scale, the one NVIDIA's {NEMO_MIN_SIMILARITY} is set on"
    return (
        f"measured by {by}, not TitaNet: NVIDIA's {NEMO_MIN_SIMILARITY} is set on TitaNet's scale, so the "
        "same number means another thing here (context.embedder: nemo with titanet_large measures on it)"
    )


def _judge(table: pa.Table, metric: str, value, side: str, null_passes: bool, line: str) -> Threshold:
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
    dropped = present & ~passes if null_passes else ~kept
    return Threshold(
        metric=metric,
        side=side,
        value=value,
        hours_kept=float(hours[~dropped].sum()),
        hours_dropped=float(hours[dropped].sum()),
        hours_null=null_hours,
        cuts_kept=int((~dropped).sum()),
        cuts_dropped=int(dropped.sum()),
        edges=edges,
        hours=counts,
        below=below,
        above=above,
        config_line=line.replace("{value}", _short(value)),
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
