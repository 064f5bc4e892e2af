"""Bucket bins for duration-bucketed sampling, from cuts metadata only (no audio is read).

1D: equal-total-duration buckets, as lhotse's estimate_duration_buckets draws them (sorted
durations; a bucket closes once its total exceeds total / num_buckets), optionally with a weight
per cut so that several datasets can be mixed by their sampling weights. 2D: each duration bucket
split into sub-buckets of equal total tokens, giving [max_duration, max_tokens] pairs, plus the
largest tokens-per-second of each bin after dropping outliers above a z-score.
"""

import gzip
import json
from collections.abc import Iterator

import numpy as np
import yaml

from sharflow.atomic import atomic_file


def iter_cut_lengths(cut_files: list[str]) -> Iterator[tuple[float, int]]:
    """(duration in seconds, characters of the normalized text or text) of every cut, streamed."""
    for path in cut_files:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                cut = json.loads(line)
                sup = cut["supervisions"][0] if cut.get("supervisions") else {}
                text = (sup.get("custom") or {}).get("normalized_text") or sup.get("text") or ""
                yield cut["duration"], len(text)


def read_cut_lengths(cut_files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Durations and token counts of every cut, as arrays (8 bytes each per cut)."""
    pairs = np.fromiter(iter_cut_lengths(cut_files), dtype=np.dtype((np.float64, 2)))
    return pairs[:, 0].copy(), pairs[:, 1].copy()


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
    bins, total = [], 0.0
    for size, m in zip(sizes.tolist(), mass.tolist(), strict=True):
        if total > per_bucket:
            bins.append(float(size))
            total = 0.0
        total += m
    return bins


def bucket_of(durations: np.ndarray, bins: list[float]) -> np.ndarray:
    """Bucket index of each duration: bucket i holds bins[i-1] <= d < bins[i]."""
    return np.searchsorted(np.asarray(bins), durations, side="right")


def duration_token_bins(
    durations: np.ndarray, tokens: np.ndarray, num_buckets: int, sub_buckets: int, z_threshold: float = 4.0
) -> tuple[list[list[float]], list[float]]:
    """2D bins [[max_duration, max_tokens], ...] and the max tokens-per-second of each bin."""
    edges = duration_bins(durations, num_buckets)
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
    cut_files: list[str], out: str, *, num_buckets: int, sub_buckets: int = 0, z_threshold: float = 4.0
) -> dict:
    """buckets.yaml for one dataset: num_buckets, bucket_duration_bins, min/max duration (+ 2D bins)."""
    durations, tokens = read_cut_lengths(cut_files)
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
        bins_2d, max_tps = duration_token_bins(durations, tokens, num_buckets, sub_buckets, z_threshold)
        result.update(
            bucket_duration_bins_2d=bins_2d, max_tps=max_tps, tokens="characters of normalized_text"
        )
    with atomic_file(out, "w", encoding="utf-8") as f:
        yaml.safe_dump(result, f, sort_keys=False)
    return result
