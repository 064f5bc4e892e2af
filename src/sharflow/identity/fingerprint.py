"""A content fingerprint of an utterance: landmark hashes of spectral peak pairs, matched by offset.

The signal is resampled to 8 kHz (so every source rate gives the same grid) and cut into 64 ms
frames every 8 ms; the peaks of its log spectrogram (a bin that is the largest of its 0.2 kHz x
104 ms neighbourhood and no more than `FLOOR_DB` below the clip's loudest bin) are the landmarks.
Each peak is paired with the next `FANOUT` peaks within 0.5 s and ± 1 kHz: a hash of (its
frequency bin, the frequency step, the time step), and the time of the first peak. Peaks are
where the energy concentrates, so they survive what copies go through: resampling, lossy codecs
(MP3, Opus), a change of gain (a constant in the log domain) and a trim or pad (a shift of every
time, which the match takes out by voting on the offset).

Two fingerprints are compared (`match`) by the hashes they share at one time offset (± 1 frame):
the count at the best offset over the number of hashes of the *shorter* one, so a segment found
inside a longer clip scores like a whole copy. A clip with fewer than `MIN_HASHES` hashes (too
short or silent) has no fingerprint and matches nothing.

A pair hash has ~2 M values, of which speech uses few often: in an index of millions of clips each
would name thousands of them. So an index finds its candidates by **triplets** (`triplets`): two
pairs of one anchor peak, a 37-bit value folded to 32 bits, that are rare where pairs are common.
A query's triplets are also looked up as they are with any one of their three peaks a frame off
(`MOVES`): a trim or a resampling moves a peak by a frame. The pair hashes then decide (`match`), as
they always have.
"""

from dataclasses import dataclass

import numpy as np

RATE = 8000
N_FFT = 512
HOP = 64  # 8 ms
FLOOR_DB = 60.0  # peaks this far below the clip's loudest bin are noise
NEIGHBOURHOOD = (19, 25)  # (bins, frames): 297 Hz x 200 ms
FANOUT = 3
MAX_DT = 63  # frames: 0.5 s
MAX_DF = 63  # bins: ~1 kHz
MIN_HASHES = 20
# What a query's triplet looks like with one of its three peaks a frame off, as (change to its first
# time step, to its second): a partner moved (one step), or the anchor moved (both, the same way)
MOVES = np.array([(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, -1)], dtype=np.int64)
HASH_DTYPE = np.dtype([("hash", "<u4"), ("time", "<i4")])  # a fingerprint as the identity jobs store it
_FOLD = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: a 37-bit triplet to 32 bits
VERSION = 1  # of the parameters above: stored with fingerprints, so old ones are never compared


@dataclass(frozen=True)
class Fingerprint:
    """Landmark hashes (uint32) and their frame times (int32), sorted by (hash, time)."""

    hashes: np.ndarray
    times: np.ndarray

    @property
    def usable(self) -> bool:
        return len(self.hashes) >= MIN_HASHES

    def __len__(self) -> int:
        return len(self.hashes)


def fingerprint(audio: np.ndarray, rate: int) -> Fingerprint:
    """The fingerprint of a mono clip (float samples at `rate`)."""
    from scipy.ndimage import maximum_filter

    x = _at_8k(np.asarray(audio, dtype=np.float32), rate)
    if len(x) < N_FFT:
        return _empty()
    frames = np.lib.stride_tricks.sliding_window_view(x, N_FFT)[::HOP]
    spec = np.abs(np.fft.rfft(frames * np.hanning(N_FFT).astype(np.float32), axis=1)).T  # (bins, frames)
    db = 20 * np.log10(spec + 1e-9)
    top = db.max()
    if top < -100:  # digital silence
        return _empty()
    peaks = (db == maximum_filter(db, size=NEIGHBOURHOOD, mode="constant", cval=-np.inf)) & (
        db > top - FLOOR_DB
    )
    f, t = np.nonzero(peaks)
    order = np.lexsort((f, t))  # by time, then frequency
    f, t = f[order], t[order]
    hashes, times = [], []
    for i in range(len(t)):
        j = i + 1
        made = 0
        while j < len(t) and made < FANOUT and t[j] - t[i] <= MAX_DT:
            df = int(f[j]) - int(f[i])
            if t[j] > t[i] and abs(df) <= MAX_DF:
                hashes.append((int(f[i]) << 14) | ((df + MAX_DF) << 7) | int(t[j] - t[i]))
                times.append(int(t[i]))
                made += 1
            j += 1
    if not hashes:
        return _empty()
    h, tm = np.array(hashes, dtype=np.uint32), np.array(times, dtype=np.int32)
    order = np.lexsort((tm, h))
    return Fingerprint(h[order], tm[order])


def match(a: Fingerprint, b: Fingerprint) -> float:
    """How much of the shorter fingerprint the other holds at one time offset: 0 (nothing) to 1."""
    if not (a.usable and b.usable):
        return 0.0
    ia, ib = shared(a.hashes, b.hashes)
    if len(ia) == 0:
        return 0.0
    return best_offset_count(b.times[ib] - a.times[ia]) / min(_distinct(a), _distinct(b))


def best_offset_count(offsets: np.ndarray) -> int:
    """The most offsets that fall within ± 1 frame of one value (a copy's offsets agree)."""
    if len(offsets) == 0:
        return 0
    values, counts = np.unique(offsets, return_counts=True)
    lookup = dict(zip(values.tolist(), counts.tolist(), strict=True))
    return max(lookup.get(v - 1, 0) + c + lookup.get(v + 1, 0) for v, c in lookup.items())


def triplets(hashes: np.ndarray, times: np.ndarray, moved: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The triplet keys (uint32) of a fingerprint's pair hashes, and for each the row (in `hashes`)
    of one pair of its anchor (whose time is the triplet's): every two pairs of one anchor peak (the
    same time and frequency bin; FANOUT pairs make FANOUT * (FANOUT - 1) / 2 triplets), the two
    (frequency step, time step) in one order whatever the pairs' order. With `moved`, each also as
    it is with one of its peaks a frame off (MOVES; time steps within 1 .. MAX_DT, where pairs are
    made): what a query looks up, so that a peak moved by a frame still finds its triplet."""
    t = times.astype(np.int64)
    order = np.argsort((t << 23) | hashes.astype(np.int64))  # by anchor (time, bin), then step
    h, t = hashes[order].astype(np.int64), t[order]
    anchor = (t << 9) | (h >> 14)
    i, j = [], []
    for d in range(1, FANOUT):  # an anchor's pairs lie side by side, at most FANOUT of them
        first = np.flatnonzero(anchor[d:] == anchor[:-d])
        i.append(first)
        j.append(first + d)
    i, j = np.concatenate(i), np.concatenate(j)
    shifts = MOVES if moved else MOVES[:1]
    dta = (h[i] & 127)[:, None] + shifts[None, :, 0]
    dtb = (h[j] & 127)[:, None] + shifts[None, :, 1]
    sa = ((h[i] >> 7) & 127)[:, None] << 7 | dta
    sb = ((h[j] >> 7) & 127)[:, None] << 7 | dtb
    ok = (dta >= 1) & (dta <= MAX_DT) & (dtb >= 1) & (dtb <= MAX_DT)
    f1 = np.broadcast_to((h[i] >> 14)[:, None], ok.shape)[ok]
    keys = (f1 << 28) | (np.minimum(sa, sb)[ok] << 14) | np.maximum(sa, sb)[ok]
    rows = np.broadcast_to(order[i][:, None], ok.shape)[ok]
    folded = (keys.astype(np.uint64) * _FOLD) >> np.uint64(32)
    return folded.astype(np.uint32), rows


def shared(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j) with a[i] == b[j] (b sorted), by i: every pair of equal values."""
    lo = np.searchsorted(b, a, side="left")
    hi = np.searchsorted(b, a, side="right")
    n = hi - lo
    ia = np.repeat(np.arange(len(a)), n)
    starts = np.repeat(lo - np.concatenate(([0], np.cumsum(n)[:-1])), n)
    ib = starts + np.arange(len(ia))
    return ia, ib


def _distinct(fp: Fingerprint) -> int:
    return len(fp.hashes)


def _at_8k(x: np.ndarray, rate: int) -> np.ndarray:
    if rate == RATE:
        return x
    import soxr

    return soxr.resample(x, rate, RATE, quality="HQ").astype(np.float32)


def _empty() -> Fingerprint:
    return Fingerprint(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int32))
