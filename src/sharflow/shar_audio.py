"""Audio of a Shar shard: decoding target and context spans and encoding them (worker side).

Kept free of lhotse and torch so that worker processes start in a fraction of a second.
"""

import io
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import soundfile as sf
import soxr

from sharflow.audio import resolve_audio_path

OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_EXACT_INT16 = {"PCM_16", "PCM_S8", "PCM_U8"}


def compute_num_samples(duration: float, sampling_rate: int) -> int:
    """Samples in `duration` seconds, rounded half up exactly as lhotse counts them."""
    return int(Decimal(round(duration * sampling_rate, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


@dataclass(frozen=True)
class EncodeSettings:
    audio_root: str
    audio_format: str = "flac"
    sample_rate: int | None = None


@dataclass(frozen=True)
class EncodedAudio:
    data: bytes
    sampling_rate: int
    num_samples: int
    clipped: int
    padded: int


def read_span(
    path: str, offset: float, duration: float, sample_rate: int | None = None
) -> tuple[np.ndarray, int, int]:
    """Channel 0 of [offset, offset + duration), decoding only that span, as lhotse counts samples.

    Returns (samples, rate, samples padded with zeros past the end of the file). Samples are
    int16 when the source is at most 16-bit and kept at its rate (an exact copy), else float32.
    With `sample_rate`, the span is resampled (soxr HQ) and trimmed/padded to lhotse's count.
    """
    with sf.SoundFile(path) as f:
        rate = f.samplerate
        exact = f.subtype in _EXACT_INT16 and (not sample_rate or sample_rate == rate)
        start, n = compute_num_samples(offset, rate), compute_num_samples(duration, rate)
        f.seek(min(start, f.frames))
        data = f.read(n, dtype="int16" if exact else "float32", always_2d=True)[:, 0]
    padded = n - len(data)
    if not exact and sample_rate and sample_rate != rate:
        data = soxr.resample(data, rate, sample_rate, quality="HQ").astype(np.float32, copy=False)
        rate, n = sample_rate, compute_num_samples(duration, sample_rate)
    if len(data) != n:
        data = np.pad(data[:n], (0, max(0, n - len(data))))
    if len(data) == 0:
        raise ValueError(f"no samples at offset {offset} s")
    return np.ascontiguousarray(data), rate, padded


def encode(samples: np.ndarray, rate: int, audio_format: str) -> tuple[bytes, int]:
    """Encode mono samples (int16, or float32 in [-1, 1]); returns (bytes, samples clipped).

    flac and wav are 16-bit PCM: int16 input is written as it is; float input is rounded to the
    nearest step of 1/32768, so a 16-bit signal survives bit-exactly either way. Float samples
    beyond [-1, 1] are clipped and counted.
    """
    buf = io.BytesIO()
    if samples.dtype == np.int16:
        clipped = 0
        if audio_format == "opus":
            sf.write(buf, samples.astype(np.float32) / 32768.0, rate, format="OGG", subtype="OPUS")
        else:
            sf.write(buf, samples, rate, format=audio_format.upper(), subtype="PCM_16")
        return buf.getvalue(), clipped
    clipped = int(np.count_nonzero(np.abs(samples) > 1.0))
    if audio_format == "opus":
        sf.write(buf, np.clip(samples, -1.0, 1.0), rate, format="OGG", subtype="OPUS")
    else:
        pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
        sf.write(buf, pcm, rate, format=audio_format.upper(), subtype="PCM_16")
    return buf.getvalue(), clipped


def encode_record(
    settings: EncodeSettings, record: dict
) -> tuple[EncodedAudio, EncodedAudio] | tuple[str, str]:
    """Decode and encode the target and context spans of one record (runs in a worker process).

    Returns the two encoded audios, or (reject reason, detail).
    """
    out = []
    for keys, reason in (
        (("audio_filepath", "offset", "duration"), "unreadable_audio"),
        (
            ("context_audio_filepath", "context_audio_offset", "context_audio_duration"),
            "unreadable_context_audio",
        ),
    ):
        path, offset, duration = (record[k] for k in keys)
        try:
            full, _ = resolve_audio_path(settings.audio_root, path)
            samples, rate, padded = read_span(full, offset, duration, settings.sample_rate)
            data, clipped = encode(samples, rate, settings.audio_format)
        except Exception as e:  # reported per cut; the shard goes on
            return reason, f"{path}: {e}"
        out.append(EncodedAudio(data, rate, len(samples), clipped, padded))
    return out[0], out[1]


def encode_records(settings: EncodeSettings, records: list[dict]) -> list:
    """encode_record over a batch of records: one task per batch keeps inter-process traffic low."""
    return [encode_record(settings, r) for r in records]
