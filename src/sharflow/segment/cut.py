"""Segments from a recording's labelled pieces, and where every other second went.

Pieces of one speaker follow each other into a segment while the pause between them is at most
`max_pause` and the segment stays within `max_segment`; a piece longer than `max_segment` alone is
cut at its quietest frames into equal parts. A segment shorter than `min_segment` is dropped as
too short. A segment never holds two speakers: a change of label always closes it.

`account` partitions the whole recording, sample by sample, into kept segments and dropped
stretches with a reason, so that seconds in = kept + dropped holds exactly.
"""

import itertools
from dataclasses import dataclass

import numpy as np

from sharflow.segment.turns import NO_SPEAKER, OVERLAP, RATE, quietest

# why a stretch of a recording is not in a segment
SILENCE = "silence"  # no speech by VAD: silence, music, noise
OVERLAP_REASON = "overlap"  # two voices at once
NO_SPEAKER_REASON = "no_speaker"  # speech that matches none of the recording's speakers
TOO_SHORT = "too_short"  # a speaker's stretch shorter than min_segment
LOW_CONFIDENCE = "low_confidence"  # the transcript's confidence under the threshold
UNREADABLE = "unreadable"  # the recording could not be decoded
REASONS = (SILENCE, OVERLAP_REASON, NO_SPEAKER_REASON, TOO_SHORT, LOW_CONFIDENCE, UNREADABLE)


@dataclass(frozen=True)
class CutSettings:
    min_segment: float = 3.0
    max_segment: float = 30.0
    max_pause: float = 1.5  # s: the longest pause inside a segment


def _split_long(piece: tuple[int, int, int], probs: np.ndarray, longest: int) -> list[tuple[int, int, int]]:
    """A piece longer than `longest` samples as equal parts, each cut at the quietest frame within a
    second of the even cut."""
    start, end, label = piece
    parts = -(-(end - start) // longest)
    if parts <= 1:
        return [piece]
    cuts = [start]
    for k in range(1, parts):
        guess = start + (end - start) * k // parts
        cut, _ = quietest(probs, max(cuts[-1], guess - RATE), min(end, guess + RATE))
        cuts.append(min(max(cut, cuts[-1] + 1), end - 1))
    cuts.append(end)
    return [(a, b, label) for a, b in itertools.pairwise(cuts)]


def segments(
    pieces: list[tuple[int, int, int]], probs: np.ndarray, settings: CutSettings
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, str]]]:
    """(kept segments as (start, end, speaker), dropped stretches as (start, end, reason)) of a
    recording's pieces, in order. Pauses outside segments are not listed (`account` fills them)."""
    longest, shortest = int(settings.max_segment * RATE), int(settings.min_segment * RATE)
    pause = int(settings.max_pause * RATE)
    kept: list[tuple[int, int, int]] = []
    dropped: list[tuple[int, int, str]] = []
    group: list[tuple[int, int, int]] = []

    def close() -> None:
        if group:
            start, end, label = group[0][0], group[-1][1], group[0][2]
            if end - start >= shortest:
                kept.append((start, end, label))
            else:
                dropped.append((start, end, TOO_SHORT))
            group.clear()

    for piece in sorted(pieces):
        label = piece[2]
        if label in (OVERLAP, NO_SPEAKER):
            close()
            dropped.append((piece[0], piece[1], OVERLAP_REASON if label == OVERLAP else NO_SPEAKER_REASON))
            continue
        for part in _split_long(piece, probs, longest):
            if group and (
                part[2] != group[0][2] or part[0] - group[-1][1] > pause or part[1] - group[0][0] > longest
            ):
                close()
            group.append(part)
    close()
    return kept, dropped


def account(num_samples: int, stretches: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The recording as disjoint (start, end, what) stretches covering [0, num_samples) exactly:
    the given ones (kept or dropped, disjoint), and SILENCE between them."""
    out, cursor = [], 0
    for start, end, what in sorted(stretches):
        if start < cursor:
            raise ValueError(f"stretches overlap at sample {start}")
        if start > cursor:
            out.append((cursor, start, SILENCE))
        out.append((start, end, what))
        cursor = end
    if cursor < num_samples:
        out.append((cursor, num_samples, SILENCE))
    return out
