"""Speaker turns inside one recording, from its VAD probabilities and windowed speaker embeddings.

Pure functions over arrays (no models), so that each step is tested directly:

1. `speech_spans`: stretches of speech, split at pauses of at least `min_pause` (Silero's own
   thresholds over its per-frame probabilities, a frame above both its neighbours clipped to the
   higher of them first: one 32 ms frame over the threshold in a pause does not carry a span on);
2. `windows`: fixed-length windows every `hop` seconds over each span (a span shorter than a window
   is one window), whose speaker embeddings the caller computes;
3. `speakers`: the spans' mean embeddings clustered by average linkage on cosine similarity (merged
   while above `cluster_similarity`); a cluster with at least `min_speaker_seconds` of speech is a
   speaker, the number of speakers is the number of such clusters; centroids are then refitted on
   the windows that match one speaker clearly;
4. `labels`: each hop-long cell of speech gets the speaker whose centroid its covering windows
   match best (their similarities averaged), `OVERLAP` where the windows hold, on average, more
   than `overlap_share` of a second speaker (`_second_share`), `NO_SPEAKER` where none reaches
   `attribute_similarity`; runs shorter than `min_run` (overlap: `min_overlap`) are absorbed by
   their neighbours;
5. `pieces`: runs of one label within a span, split where the label changes: at the quietest
   frame near a change of speaker, and on the kept side of a dropped run (`pieces`).

Everything is in samples at 16 kHz; only the boundaries of spans and pieces are returned, never
audio.
"""

import itertools
from dataclasses import dataclass

import numpy as np

RATE = 16000
FRAME = 512  # samples a VAD probability
OVERLAP, NO_SPEAKER = -1, -2
PAUSE_PROBABILITY = 0.35  # Silero's own end-of-speech threshold (its threshold 0.5 - 0.15)


@dataclass(frozen=True)
class TurnSettings:
    min_pause: float = 0.1  # s of non-speech that splits speech spans
    window: float = 1.0  # s, a speaker-embedding window
    hop: float = 0.5  # s between windows (and a label cell)
    cluster_similarity: float = 0.8
    min_speaker_seconds: float = 10.0
    attribute_similarity: float = 0.7
    overlap_share: float = 0.3
    min_run: float = 0.75  # s: shorter label runs inside a span are absorbed
    # s: shorter overlap runs are absorbed: windows that straddle a change of speaker look mixed for
    # about a window's length, two voices at once for longer
    min_overlap: float = 1.5
    max_clustered_spans: int = 2000  # spans clustered at once (the rest are assigned): bounded memory


def speech_spans(probs: np.ndarray, num_samples: int, settings: TurnSettings) -> list[tuple[int, int]]:
    """(start, end) samples of speech from per-frame probabilities, by Silero's own rule."""
    from silero_vad import get_speech_timestamps_from_probs

    found = get_speech_timestamps_from_probs(
        without_spikes(probs).tolist(),
        sampling_rate=RATE,
        min_silence_duration_ms=int(round(settings.min_pause * 1000)),
        audio_length_samples=num_samples,
    )
    return [(int(s["start"]), int(s["end"])) for s in found]


def without_spikes(probs: np.ndarray) -> np.ndarray:
    """Each frame's probability at most the higher of its neighbours': a single frame above both is
    clipped to them. Silero's rule ends a span only where no frame reaches the threshold again for
    `min_pause`; one frame that does (music's onset decaying under the threshold, 0.53 in a run of
    0.1-0.3) would carry the span on into the music. Two frames above it in a row still do."""
    p = np.asarray(probs, dtype=np.float32)
    if len(p) < 3:
        return p
    neighbours = np.maximum(np.r_[p[1], p[:-1]], np.r_[p[1:], p[-2]])
    return np.minimum(p, neighbours)


def windows(spans: list[tuple[int, int]], settings: TurnSettings) -> list[tuple[int, int, int]]:
    """(span index, start, end) of the embedding windows: every hop while a whole window fits, and
    one ending at the span's end; a span shorter than a window is one window."""
    size, hop = int(settings.window * RATE), int(settings.hop * RATE)
    out = []
    for i, (s, e) in enumerate(spans):
        if e - s <= size:
            out.append((i, s, e))
            continue
        starts = list(range(s, e - size + 1, hop))
        if starts[-1] + size < e:
            starts.append(e - size)
        out.extend((i, x, x + size) for x in starts)
    return out


def unit(x: np.ndarray) -> np.ndarray:
    """Rows of `x` scaled to unit length (a zero row stays zero)."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def speakers(
    spans: list[tuple[int, int]],
    wins: list[tuple[int, int, int]],
    embeddings: np.ndarray,
    settings: TurnSettings,
) -> np.ndarray:
    """(k, dim) unit centroids of the recording's speakers (k may be 0)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if not spans:
        return np.zeros((0, embeddings.shape[1]), np.float32)
    owner = np.array([w[0] for w in wins])  # windows come in span order, every span with one at least
    starts = np.searchsorted(owner, np.arange(len(spans)))
    counts = np.diff([*starts, len(wins)])[:, None]
    means = unit(np.add.reduceat(embeddings, starts, axis=0) / counts)
    seconds = np.array([(e - s) / RATE for s, e in spans])
    # the longest spans are clustered (bounded: at most max_clustered_spans² distances)
    chosen = np.argsort(-seconds, kind="stable")[: settings.max_clustered_spans]
    chosen.sort()
    if len(chosen) == 1:
        groups = np.ones(1, np.int64)
    else:
        tree = linkage(means[chosen].astype(np.float64), "average", metric="cosine")
        groups = fcluster(tree, 1 - settings.cluster_similarity, "distance")
    clusters = [chosen[groups == g] for g in np.unique(groups)]
    centroids = [means[c].mean(0) for c in clusters if seconds[c].sum() >= settings.min_speaker_seconds]
    if not centroids:
        return np.zeros((0, embeddings.shape[1]), np.float32)
    centroids = unit(np.stack(centroids))
    # refit on the windows that match one speaker clearly (the mixed and overlapped ones left out)
    sims = embeddings @ centroids.T
    best, single = sims.argmax(1), _second_share(embeddings, centroids) < settings.overlap_share
    refit = []
    for k in range(len(centroids)):
        clear = (best == k) & (sims[:, k] >= settings.attribute_similarity) & single
        refit.append(embeddings[clear].mean(0) if clear.any() else centroids[k])
    return unit(np.stack(refit)).astype(np.float32)


def _second_share(embeddings: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """How much of a second speaker each embedding holds: for the pair of centroids that fits it
    best by least squares (e ≈ α·a + β·b), the smaller share min(α, β) / max(α, β): about 1 for an
    even mix, about 0 for one voice alone. Unlike a plain similarity to the mix of two centroids, a
    pair of alike voices does not make one voice alone look mixed."""
    k = len(centroids)
    if k < 2:
        return np.full(len(embeddings), -np.inf)
    best = np.full(len(embeddings), -np.inf)
    fit = np.full(len(embeddings), np.inf)
    for a in range(k):
        for b in range(a + 1, k):
            basis = np.stack([centroids[a], centroids[b]], 1)  # (dim, 2)
            coef, *_ = np.linalg.lstsq(basis, embeddings.T, rcond=None)  # (2, n)
            residual = np.linalg.norm(embeddings.T - basis @ coef, axis=0)
            hi, lo = coef.max(0), coef.min(0)
            share = np.where(hi > 0, np.clip(lo, 0, None) / np.maximum(hi, 1e-9), 0.0)
            better = residual < fit
            fit = np.where(better, residual, fit)
            best = np.where(better, share, best)
    return best


def labels(
    span: tuple[int, int],
    wins: list[tuple[int, int]],
    embeddings: np.ndarray,
    centroids: np.ndarray,
    settings: TurnSettings,
) -> np.ndarray:
    """One label per hop-long cell of a span: a speaker index, OVERLAP or NO_SPEAKER."""
    hop = int(settings.hop * RATE)
    start, end = span
    cells = max(1, -(-(end - start) // hop))
    if len(centroids) == 0:
        return np.full(cells, NO_SPEAKER, np.int64)
    centers = start + hop * np.arange(cells) + hop // 2
    sims = embeddings @ centroids.T
    share = _second_share(embeddings, centroids)
    out = np.empty(cells, np.int64)
    ws = np.array(wins)
    for c, x in enumerate(np.minimum(centers, end - 1)):
        cover = (ws[:, 0] <= x) & (x < ws[:, 1])
        if not cover.any():
            cover = np.abs((ws[:, 0] + ws[:, 1]) / 2 - x) == np.abs((ws[:, 0] + ws[:, 1]) / 2 - x).min()
        mean = sims[cover].mean(0)
        if share[cover].mean() > settings.overlap_share:
            out[c] = OVERLAP
        elif mean.max() < settings.attribute_similarity:
            out[c] = NO_SPEAKER
        else:
            out[c] = int(mean.argmax())
    cells = lambda seconds: max(1, int(round(seconds / settings.hop)))  # noqa: E731
    return _absorb_short_runs(out, cells(settings.min_run), cells(settings.min_overlap))


def _runs(cells: np.ndarray) -> list[tuple[int, int, int]]:
    """(label, first cell, end cell) of each run of equal labels."""
    change = np.flatnonzero(np.diff(cells)) + 1
    bounds = [0, *change.tolist(), len(cells)]
    return [(int(cells[a]), a, b) for a, b in itertools.pairwise(bounds)]


def _absorb_short_runs(cells: np.ndarray, shortest: int, shortest_overlap: int | None = None) -> np.ndarray:
    """Runs shorter than `shortest` cells (an OVERLAP run: `shortest_overlap`) take the label of
    their longer neighbour, shortest run first, until none is left (a span of one run keeps it)."""
    cells = cells.copy()
    least = {OVERLAP: max(shortest, shortest_overlap or shortest)}
    while True:
        runs = _runs(cells)
        short = [(b - a, a, i) for i, (k, a, b) in enumerate(runs) if b - a < least.get(k, shortest)]
        if len(runs) < 2 or not short:
            return cells
        _, _, i = min(short)
        left = runs[i - 1] if i > 0 else None
        right = runs[i + 1] if i + 1 < len(runs) else None
        pick = max((r for r in (left, right) if r is not None), key=lambda r: (r[2] - r[1], r is left))
        cells[runs[i][1] : runs[i][2]] = pick[0]


def quietest(probs: np.ndarray, lo: int, hi: int) -> tuple[int, float]:
    """(the middle sample of the frame of least speech probability in samples [lo, hi) (at least the
    frame of lo), that probability; 1.0 past the probabilities' end)."""
    first = lo // FRAME
    window = probs[first : max(hi // FRAME, first + 1)]
    if not len(window):
        return first * FRAME + FRAME // 2, 1.0
    frame = first + int(np.argmin(window))
    return frame * FRAME + FRAME // 2, float(window.min())


def pieces(
    span: tuple[int, int], cells: np.ndarray, probs: np.ndarray, settings: TurnSettings
) -> list[tuple[int, int, int]]:
    """(start, end, label) pieces of a span: its runs of one label, cut where the label changes.

    Between two speakers the cut is the frame of least speech probability within half a window of
    the change. Beside a dropped run (overlap, no speaker) the change is known only to a window's
    length, so the cut goes to the kept side: at a pause there (a frame under Silero's
    `PAUSE_PROBABILITY`) if there is one, else a whole window into it, so that what is kept never
    holds the dropped voice."""
    start, end = span
    hop, size = int(settings.hop * RATE), int(settings.window * RATE)
    runs = _runs(cells)
    cuts = [start]
    for (left, _, b), (right, _, _) in itertools.pairwise(runs):
        guess = start + b * hop
        if left < 0 <= right:  # dropped, then kept: look right
            lo, hi, fallback = guess, min(end, guess + size), min(end, guess + size)
        elif right < 0 <= left:  # kept, then dropped: look left
            lo, hi, fallback = max(start, guess - size), guess, max(start, guess - size)
        else:
            lo, hi, fallback = max(start, guess - size // 2), min(end, guess + size // 2), None
        best, least = quietest(probs, lo, hi)
        cut = best if fallback is None or least < PAUSE_PROBABILITY else fallback
        cuts.append(min(max(cut, cuts[-1] + 1), end - 1))
    cuts.append(end)
    return [(a, b, label) for (label, _, _), a, b in zip(runs, cuts[:-1], cuts[1:], strict=True)]
