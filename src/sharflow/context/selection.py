"""Context selection inside one speaker group, in bounded memory.

For each utterance, walk the other utterances from most to least similar (ties by index): skip
itself and identical segments, stop once similarity < min_similarity, accept the first eligible
one (not marked failing) whose duration is within [min_duration, max_duration]. Similarity is
the cosine of L2-normalised embeddings, computed `block` rows at a time; each row keeps only its
top-k candidates, so memory is O(block·n + n·k), never n×n. Only candidates strictly above the
k-th value are certain to be complete, so a row undecided among them is widened (k ×4, from the
same block row) until decided: the result equals the exhaustive full-sort walk.
"""

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class SelectionRules:
    min_similarity: float = 0.6
    min_duration: float = 3.0
    max_duration: float | None = None
    top_k: int = 32
    scale: str = "ge2e"  # what measures the similarities (embedder_label), recorded with each choice


@dataclass
class Selection:
    """Per utterance: chosen index (-1 if none), its similarity, and the best similarity seen."""

    choice: np.ndarray
    similarity: np.ndarray
    best_seen: np.ndarray
    widened_rows: int = 0


def _walk(
    i: int,
    vals: np.ndarray,
    idx: np.ndarray,
    complete: bool,
    ok_duration: np.ndarray,
    same_segment: np.ndarray | None,
    min_similarity: float,
) -> tuple[int, float, float] | None:
    """Walk one row's candidates (sorted by -similarity, index). None means: widen and retry.

    `complete` says the candidates are every candidate of the row; otherwise only those strictly
    above the last value are known to be all there is at that level.
    """
    order = np.lexsort((idx, -vals))
    vals, idx = vals[order], idx[order]
    boundary = -np.inf if complete else vals[-1]
    best = -np.inf
    for v, j in zip(vals.tolist(), idx.tolist(), strict=True):
        if not complete and v <= boundary:
            break
        if j == i or (same_segment is not None and same_segment[j] == same_segment[i]):
            continue
        best = max(best, v)
        if v < min_similarity:
            return -1, float("nan"), best
        if ok_duration[j]:
            return j, v, best
    else:
        return -1, float("nan"), best
    if boundary < min_similarity and best > -np.inf:
        # everything not walked is at or below the boundary, hence below the threshold, and the
        # best similarity seen is already known
        return -1, float("nan"), best
    return None


def select_context(
    embeddings: np.ndarray | torch.Tensor,
    durations: np.ndarray,
    rules: SelectionRules,
    same_segment: np.ndarray | None = None,
    device: str | torch.device = "cpu",
    block: int = 1024,
    eligible: np.ndarray | None = None,
) -> Selection:
    """Choose a context for each of n utterances of one group.

    embeddings: (n, d), any scale (L2-normalised here). durations: (n,) seconds.
    same_segment: optional (n,) integer ids; equal ids are identical segments and never chosen.
    eligible: optional (n,) booleans; an ineligible utterance gets a context but is never one.
    """
    emb = torch.as_tensor(embeddings, dtype=torch.float32, device=device)
    emb = torch.nn.functional.normalize(emb, dim=1)
    n = emb.shape[0]
    durations = np.asarray(durations, dtype=np.float64)
    ok = durations >= rules.min_duration
    if rules.max_duration is not None:
        ok &= durations <= rules.max_duration
    if eligible is not None:
        ok &= np.asarray(eligible, dtype=bool)
    choice = np.full(n, -1, dtype=np.int64)
    similarity = np.full(n, np.nan)
    best_seen = np.full(n, np.nan)
    widened = 0
    for start in range(0, n, block):
        sims = emb[start : start + block] @ emb.T  # (b, n)
        k = min(rules.top_k + 1, n)  # +1: the row's own entry is among the top
        vals, idx = torch.topk(sims, k, dim=1, sorted=False)
        vals, idx = vals.cpu().numpy(), idx.cpu().numpy()
        for r in range(sims.shape[0]):
            i = start + r
            kk, v, ix = k, vals[r], idx[r]
            while (res := _walk(i, v, ix, kk == n, ok, same_segment, rules.min_similarity)) is None:
                if kk == n:  # a complete row always decides: never widen (loop) on one
                    raise AssertionError(f"row {i}: undecided with all {n} candidates")
                widened += kk == k
                kk = min(4 * kk, n)
                tv, ti = torch.topk(sims[r], kk, sorted=False)
                v, ix = tv.cpu().numpy(), ti.cpu().numpy()
            choice[i], similarity[i], best_seen[i] = res
    return Selection(choice, similarity, best_seen, widened)


def select_context_exhaustive(
    embeddings: np.ndarray,
    durations: np.ndarray,
    rules: SelectionRules,
    same_segment: np.ndarray | None = None,
    eligible: np.ndarray | None = None,
) -> Selection:
    """Reference method, written from the rules alone and sharing no code with select_context.

    The full n×n similarity matrix; each row sorted whole (most similar first, ties by index), then
    walked: skip itself and identical segments, stop below min_similarity, take the first within
    the duration limits. best_seen is the first similarity walked (-inf when there is none). For
    tests and benchmarks only.
    """
    emb = torch.nn.functional.normalize(torch.as_tensor(embeddings, dtype=torch.float32), dim=1)
    sims = (emb @ emb.T).numpy()
    n = len(durations)
    out = Selection(np.full(n, -1, dtype=np.int64), np.full(n, np.nan), np.full(n, -np.inf))
    for i in range(n):
        others = [
            j for j in range(n) if j != i and (same_segment is None or same_segment[j] != same_segment[i])
        ]
        for rank, j in enumerate(sorted(others, key=lambda j: (-float(sims[i, j]), j))):
            similarity = float(sims[i, j])
            if rank == 0:
                out.best_seen[i] = similarity
            if similarity < rules.min_similarity:
                break
            long_enough = durations[j] >= rules.min_duration
            short_enough = rules.max_duration is None or durations[j] <= rules.max_duration
            usable = eligible is None or bool(eligible[j])
            if long_enough and short_enough and usable:
                out.choice[i], out.similarity[i] = j, similarity
                break
    return out
