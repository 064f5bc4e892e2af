"""Bucket bins for duration-bucketed sampling, from the dataset catalog (no audio is read).

1D: equal-total-duration buckets, as lhotse's estimate_duration_buckets draws them (sorted
durations; a bucket closes once its total exceeds total / num_buckets), optionally with a weight
per cut so that several datasets can be mixed by their sampling weights. 2D: each duration bucket
split into sub-buckets of equal total tokens, giving [max_duration, max_tokens] pairs, plus the
largest tokens-per-second of each bin after dropping outliers above a z-score. Tokens are the
catalog's `tokens` (counted with training.tokenizer) when it has them, else characters of what the
model reads: normalized_text wherever the cut has the key (even empty: NeMo's rule), else text. The
same lengths can be read from the Shar cuts files (read_cut_lengths), which gives the same bins,
many times slower (benchmarks/bench_buckets.py).
"""

import json
from collections.abc import Iterator

import numpy as np
import yaml

from sharflow.core.atomic import atomic_file
from sharflow.core.shar_fields import open_cuts


def iter_cut_lengths(cut_files: list[str]) -> Iterator[tuple[float, int]]:
    """(duration in seconds, characters of what the model reads) of every cut, streamed: the
    supervision's normalized_text wherever it has the key, else its text (MagpieTTS's rule)."""
    for path in cut_files:
        with open_cuts(path) as f:
            for line in f:
                cut = json.loads(line)
                sup = cut["supervisions"][0] if cut.get("supervisions") else {}
                custom = sup.get("custom") or {}
                text = custom["normalized_text"] if "normalized_text" in custom else sup.get("text")
                text = text or ""
                yield cut["duration"], len(text)


def read_cut_lengths(cut_files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Durations and characters of every cut from the cuts files, as arrays (8 bytes each per cut)."""
    pairs = np.fromiter(iter_cut_lengths(cut_files), dtype=np.dtype((np.float64, 2)))
    return pairs[:, 0].copy(), pairs[:, 1].copy()


CHARACTERS = "characters of normalized_text"
TOKENS = "tokens (training.tokenizer)"


def read_catalog_lengths(catalog: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Durations and lengths of every train cut from the catalog's columns (bins are estimated on
    train only), and what the lengths count.

    Read a batch at a time into two arrays (8 bytes per cut each), not as a whole table.
    """
    from sharflow.dataset.catalog import column_names, iter_batches

    tokens = "tokens" in column_names(catalog)
    columns = ["duration", "tokens"] if tokens else ["duration", "text_chars", "normalized_text_chars"]
    parts_d, parts_l = [], []
    for batch in iter_batches(catalog, columns, batch_rows=65536):  # train rows (splits: train only)
        d = batch.column(0).to_numpy()
        if tokens:
            length = batch.column(1).to_numpy()
        else:  # characters of normalized_text wherever the cut has one (even empty), else of text
            # (nulls read as NaN; arrow's fill_null would start its compute kernels, ~0.4 s)
            normalized = batch.column(2).to_numpy(zero_copy_only=False).astype(np.float64)
            length = np.where(np.isnan(normalized), batch.column(1).to_numpy(), normalized)
        parts_d.append(d)
        parts_l.append(np.asarray(length, dtype=np.float64))
    durations = np.concatenate(parts_d) if parts_d else np.empty(0)
    lengths = np.concatenate(parts_l) if parts_l else np.empty(0)
    return durations, lengths, TOKENS if tokens else CHARACTERS


def duration_bins(durations: np.ndarray, num_buckets: int, weights: np.ndarray | None = None) -> list[float]:
    """num_buckets - 1 boundaries of equal (weighted) total duration; plain floats.

    With no weights this is exactly lhotse's estimate_duration_buckets.
    """
    if num_buckets < 2 or len(durations) < num_buckets:
        raise ValueError(
            f"need 2 <= num_buckets <= number of cuts, got {num_buckets} for {len(durations)} cuts"
        )
    weights = np.ones_like(durations) if weights is None else np.asarray(weights, dtype=np.float64)
    order = np.argsort(durations, kind="stable")
    sizes, mass = durations[order], (durations * weights)[order]
    per_bucket = mass.sum() / num_buckets
    # lhotse's loop (a bucket closes at the first cut seen once its total exceeds per_bucket),
    # one bucket at a time: the total is summed from 0 at the bucket's first cut in the loop's
    # order (np.cumsum adds in sequence), so every float sum, and every bin, is the loop's.
    bins, start = [], 0
    while start < len(sizes):
        totals = np.cumsum(mass[start:])
        close = start + int(np.searchsorted(totals, per_bucket, side="right")) + 1
        if close >= len(sizes):
            break
        bins.append(float(sizes[close]))
        start = close
    return bins


def bucket_of(durations: np.ndarray, bins: list[float]) -> np.ndarray:
    """Bucket index of each duration: bucket i holds bins[i-1] <= d < bins[i]."""
    return np.searchsorted(np.asarray(bins), durations, side="right")


def sampler_bucket_of(durations: np.ndarray, bins: list[float]) -> np.ndarray:
    """The 1D bucket lhotse's DynamicBucketingSampler puts each cut in (bisect_left on the bins)."""
    return np.searchsorted(np.asarray(bins), durations, side="left")


def sampler_bin_2d_of(
    durations: np.ndarray, tokens: np.ndarray, bins_2d: list[list[float]], max_tps: list[float] | None = None
) -> np.ndarray:
    """The 2D bin NeMo's strict 2D bucketing puts each cut in, -1 for none (the cut is dropped).

    As nemo.collections.common.data.lhotse.sampling.find_smallest_bucket (strict): the first
    duration level that holds the cut, then the first token bound in that level that holds it, and
    the bin's max_tps (NeMo's max_ratio) when given.
    """
    bins = np.asarray(bins_2d, dtype=np.float64).reshape(-1, 2)
    out = np.full(len(durations), -1, dtype=np.int64)
    levels, starts = np.unique(bins[:, 0], return_index=True)
    level_of = np.searchsorted(levels, durations, side="left")
    for lvl, start in enumerate(starts.tolist()):
        end = starts[lvl + 1] if lvl + 1 < len(starts) else len(bins)
        here = np.flatnonzero(level_of == lvl)
        sub = np.searchsorted(bins[start:end, 1], tokens[here], side="left")
        fits = sub < end - start
        idx = start + sub[fits]
        if max_tps is not None:
            ratio = tokens[here][fits] / np.maximum(durations[here][fits], 1e-12)
            keep = ratio <= np.asarray(max_tps)[idx]
            idx, hits = idx[keep], here[fits][keep]
        else:
            hits = here[fits]
        out[hits] = idx
    return out


def duration_token_bins(
    durations: np.ndarray,
    tokens: np.ndarray,
    num_buckets: int,
    sub_buckets: int,
    z_threshold: float = 4.0,
    edges: list[float] | None = None,
) -> tuple[list[list[float]], list[float]]:
    """2D bins [[max_duration, max_tokens], ...] and the max tokens-per-second of each bin.

    `edges`: the 1D bins duration_bins(durations, num_buckets) gives, when already computed.
    """
    edges = duration_bins(durations, num_buckets) if edges is None else edges
    which = bucket_of(durations, edges)
    bins, max_tps = [], []
    for b in range(len(edges) + 1):  # ties or few cuts can give fewer buckets than asked for
        d, t = durations[which == b], tokens[which == b]
        if len(d) == 0:
            continue
        order = np.argsort(t, kind="stable")
        d, t = d[order], t[order]
        cum = np.cumsum(t)
        cuts = [
            int(np.searchsorted(cum, cum[-1] * k / sub_buckets, side="left")) for k in range(1, sub_buckets)
        ]
        for part in np.split(np.arange(len(t)), sorted(set(cuts))):
            if len(part) == 0:
                continue
            tps = t[part] / np.maximum(d[part], 1e-3)
            keep = tps if tps.std() == 0 else tps[(tps - tps.mean()) / tps.std() <= z_threshold]
            bins.append([float(d.max()) if b == len(edges) else float(edges[b]), float(t[part].max())])
            max_tps.append(float(keep.max()))
    return bins, max_tps


def write_buckets(
    catalog: str, out: str, *, num_buckets: int, sub_buckets: int = 0, z_threshold: float = 4.0
) -> dict:
    """buckets.yaml for one dataset: num_buckets, bucket_duration_bins, min/max duration (+ 2D bins)."""
    durations, tokens, counted = read_catalog_lengths(catalog)
    result = bucket_bins(
        durations, tokens, num_buckets=num_buckets, sub_buckets=sub_buckets, z_threshold=z_threshold
    )
    if "bucket_duration_bins_2d" in result:
        result["tokens"] = counted
    with atomic_file(out, "w", encoding="utf-8") as f:
        yaml.safe_dump(result, f, sort_keys=False)
    return result


def bucket_bins(
    durations: np.ndarray,
    tokens: np.ndarray,
    *,
    num_buckets: int,
    sub_buckets: int = 0,
    z_threshold: float = 4.0,
) -> dict:
    """What buckets.yaml holds, from every cut's duration and length."""
    num_buckets = min(num_buckets, len(durations))
    bins = duration_bins(durations, num_buckets) if num_buckets >= 2 else []
    result = {
        "num_buckets": len(bins) + 1,  # ties or few cuts can give fewer buckets than asked for
        "bucket_duration_bins": bins,
        "min_duration": float(durations.min()) if len(durations) else 0.0,
        "max_duration": float(durations.max()) if len(durations) else 0.0,
        "cuts": len(durations),
        "hours": round(float(durations.sum()) / 3600, 6),
    }
    if sub_buckets and num_buckets >= 2:
        bins_2d, max_tps = duration_token_bins(
            durations, tokens, num_buckets, sub_buckets, z_threshold, edges=bins
        )
        result.update(bucket_duration_bins_2d=bins_2d, max_tps=max_tps, tokens=CHARACTERS)
    return result
