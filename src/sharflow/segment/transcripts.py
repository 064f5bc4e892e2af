"""A transcript for each kept segment, from the configured ASR model, with its confidence; a segment
whose confidence is under `min_confidence` is dropped as low confidence (its seconds stay
accounted for).

Segments are transcribed in batches of like length (sorted by length, about `batch_seconds` of
audio a batch), so that a segment's transcript and confidence do not depend on the recording's
other segments beyond the padding a batch adds (none with NeMo's masked encoders; tested).
"""

import dataclasses

import numpy as np

from sharflow.segment import cut
from sharflow.segment.recording import KEPT, Segmented
from sharflow.segment.turns import RATE


def transcribe(
    audio: np.ndarray, result: Segmented, transcriber, min_confidence: float, batch_seconds: float = 120.0
) -> Segmented:
    """`result` with a (text, confidence) per kept segment; those under `min_confidence` dropped."""
    clips = [audio[a:b] for a, b, _ in result.segments]
    if transcriber.sample_rate != RATE:
        import soxr

        clips = [soxr.resample(c, RATE, transcriber.sample_rate).astype(np.float32) for c in clips]
    scored: list[tuple[str, float]] = [("", 0.0)] * len(clips)
    order = sorted(range(len(clips)), key=lambda i: (len(clips[i]), i))
    batch: list[int] = []
    for position, i in enumerate(order):
        batch.append(i)
        full = sum(len(clips[j]) for j in batch) >= batch_seconds * transcriber.sample_rate
        if full or position == len(order) - 1:
            for j, pair in zip(batch, transcriber.transcribe_scored([clips[j] for j in batch]), strict=True):
                scored[j] = pair
            batch = []
    keep = [i for i, (_, confidence) in enumerate(scored) if confidence >= min_confidence]
    low = {result.segments[i][:2] for i in set(range(len(scored))) - set(keep)}
    stretches = [
        (a, b, cut.LOW_CONFIDENCE if what == KEPT and (a, b) in low else what)
        for a, b, what in result.stretches
    ]
    return dataclasses.replace(
        result,
        segments=[result.segments[i] for i in keep],
        transcripts=[scored[i] for i in keep],
        stretches=stretches,
    )
