"""How well a recording's segments match a truth: edges, purity, coverage, overlap and music kept,
and the speaker clustering's adjusted Rand index.

A truth (the long-form test corpus writes one beside each recording) lists the utterances (start,
end, speaker), the stretches where two voices speak at once (`overlaps`) and those of music or
noise alone (`music`), in seconds; the parts of an `overlapped` utterance heard alone count as its
speaker's speech, but not in the single-speaker speech a segmenter must keep. A stretch counts as
kept when more than the edge tolerance of it is inside kept segments. Segments are dicts with
start, end and speaker (the segmenter's label within the recording). Everything is measured on a
10 ms grid.
"""

from dataclasses import dataclass, field

import numpy as np

STEP = 0.01  # seconds a grid cell


@dataclass
class Score:
    """Sums over one or more recordings; the rates are read from the properties."""

    edges: int = 0
    edges_near: int = 0
    kept_speech: float = 0.0  # seconds of truth speech (single or overlapped) inside kept segments
    kept_pure: float = 0.0  # of which the segment's main speaker's own single-speaker speech
    mixed_segments: int = 0  # kept segments with more than `tolerance` of a second voice or overlap
    segments: int = 0
    single_speech: float = 0.0  # seconds of the truth's single-speaker speech
    single_kept: float = 0.0
    overlap_kept: float = 0.0  # seconds of overlap stretches inside kept segments
    music_kept: float = 0.0
    stretches: int = 0  # overlap and music stretches
    stretches_kept: int = 0  # of which more than `tolerance` is inside kept segments
    aris: list[float] = field(default_factory=list)

    @property
    def edge_rate(self) -> float:
        return self.edges_near / self.edges if self.edges else 1.0

    @property
    def purity(self) -> float:
        return self.kept_pure / self.kept_speech if self.kept_speech else 1.0

    @property
    def coverage(self) -> float:
        return self.single_kept / self.single_speech if self.single_speech else 1.0

    @property
    def ari(self) -> float:
        return float(np.mean(self.aris)) if self.aris else 1.0

    def add(self, other: "Score") -> None:
        for name in self.__dataclass_fields__:
            if name == "aris":
                self.aris.extend(other.aris)
            else:
                setattr(self, name, getattr(self, name) + getattr(other, name))

    def summary(self) -> dict:
        return {
            "edges": self.edges,
            "edges_within_tolerance": round(self.edge_rate, 4),
            "purity": round(self.purity, 4),
            "mixed_segments": self.mixed_segments,
            "segments": self.segments,
            "single_speaker_speech_kept": round(self.coverage, 4),
            "overlap_seconds_kept": round(self.overlap_kept, 2),
            "music_seconds_kept": round(self.music_kept, 2),
            "overlap_or_music_stretches_kept": f"{self.stretches_kept} of {self.stretches}",
            "adjusted_rand_index": round(self.ari, 4),
        }


def _cells(seconds: float) -> int:
    return int(round(seconds / STEP))


def adjusted_rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """The adjusted Rand index of two labelings of the same items (1 = the same partition)."""
    if len(a) < 2:
        return 1.0
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1), np.int64)
    np.add.at(table, (ai, bi), 1)

    def pairs(x):
        return (x * (x - 1) // 2).sum()

    index, rows, cols, total = pairs(table), pairs(table.sum(1)), pairs(table.sum(0)), pairs(np.array(len(a)))
    expected = rows * cols / total
    best = (rows + cols) / 2
    return 1.0 if best == expected else float((index - expected) / (best - expected))


def score(truth: dict, segments: list[dict], tolerance: float = 0.3) -> Score:
    """The measures of one recording's kept segments against its truth."""
    n = _cells(truth["duration"]) + 1
    speakers = {s: i for i, s in enumerate(truth["speakers"])}
    who = np.full(n, -1, np.int64)  # truth single speaker per cell; -2 overlap
    partial = np.zeros(n, bool)  # the parts of overlapped utterances heard alone
    for u in truth["utterances"]:
        a, b = _cells(u["start"]), _cells(u["end"])
        who[a:b] = speakers[u["speaker"]]
        partial[a:b] |= bool(u.get("overlapped"))
    for o in truth["overlaps"]:
        who[_cells(o["start"]) : _cells(o["end"])] = -2
    music = np.zeros(n, bool)
    for m in truth["music"]:
        music[_cells(m["start"]) : _cells(m["end"])] = True
    single = (who >= 0) & ~partial
    out = Score(single_speech=float(single.sum() * STEP))
    edges = np.array(
        sorted(
            {e for u in truth["utterances"] for e in (u["start"], u["end"])}
            | {e for o in truth["overlaps"] for e in (o["start"], o["end"])}
        )
    )
    hyp = np.full(n, -1, np.int64)
    labels = {}
    for seg in segments:
        a, b = _cells(seg["start"]), _cells(seg["end"])
        hyp[a:b] = labels.setdefault(seg["speaker"], len(labels))
        out.segments += 1
        for edge in (seg["start"], seg["end"]):
            out.edges += 1
            out.edges_near += bool(len(edges)) and float(np.min(np.abs(edges - edge))) <= tolerance + 1e-9
        inside = who[a:b]
        speech = inside[inside != -1]
        out.kept_speech += len(speech) * STEP
        mine = np.bincount(speech[speech >= 0], minlength=len(speakers)) if len(speech) else np.zeros(1)
        main = int(mine.max()) if len(speech) else 0
        out.kept_pure += main * STEP
        if (len(speech) - main) * STEP > tolerance:
            out.mixed_segments += 1
        out.single_kept += float(single[a:b].sum() * STEP)
        out.overlap_kept += float((inside == -2).sum() * STEP)
        out.music_kept += float(music[a:b].sum() * STEP)
    for stretch in truth["overlaps"] + truth["music"]:
        out.stretches += 1
        inside = hyp[_cells(stretch["start"]) : _cells(stretch["end"])] >= 0
        out.stretches_kept += inside.sum() * STEP > tolerance
    both = single & (hyp >= 0)
    out.aris.append(adjusted_rand_index(who[both], hyp[both]))
    return out


def true_speaker(truth: dict, start: float, end: float) -> str | None:
    """The truth's speaker with the most speech in [start, end) s (None: no speech there)."""
    votes: dict[str, float] = {}
    for u in truth["utterances"]:
        overlap = min(end, u["end"]) - max(start, u["start"])
        if overlap > 0:
            votes[u["speaker"]] = votes.get(u["speaker"], 0.0) + overlap
    return max(votes, key=votes.get) if votes else None


def link_pairs(true: list, names: list[str]) -> dict[str, int]:
    """Pairs of recording speakers: {right: same voice and same name, wrong: two voices under one name,
    missed: one voice under two names}. (Counted by voice and name, not over every pair.)"""
    from collections import Counter

    def pairs(counts) -> int:
        return sum(n * (n - 1) // 2 for n in counts.values())

    both = pairs(Counter(zip(true, names, strict=True)))
    return {
        "right": both,
        "wrong": pairs(Counter(names)) - both,
        "missed": pairs(Counter(true)) - both,
    }
