"""A transcript for each kept segment, from the configured ASR model, with its confidence; a segment
whose confidence is under `min_confidence` is dropped as low confidence (its seconds stay
accounted for).

Segments are transcribed in batches of like length (the transcriber's `transcribe_sorted`: about
`batch_seconds` of audio a batch), so that a segment's transcript and confidence do not depend on
the recording's other segments beyond the padding a batch adds (none with NeMo's masked encoders;
tested).
"""

import dataclasses

import numpy as np

from sharflow.io.audio import resample
from sharflow.segment import cut
from sharflow.segment.recording import KEPT, Segmented
from sharflow.segment.turns import RATE


def transcribe(
    audio: np.ndarray, result: Segmented, transcriber, min_confidence: float, batch_seconds: float = 120.0
) -> Segmented:
    """`result` with a (text, confidence) per kept segment; those under `min_confidence` dropped."""
    clips = [resample(audio[a:b], RATE, transcriber.sample_rate) for a, b, _ in result.segments]
    scored = transcriber.transcribe_sorted(clips, batch_seconds, scored=True)
    keep = [i for i, (_, confidence) in enumerate(scored) if confidence >= min_confidence]
    low = {
        seg[:2]
        for seg, (_, confidence) in zip(result.segments, scored, strict=True)
        if confidence < min_confidence
    }
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
