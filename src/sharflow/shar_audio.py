"""Audio of a Shar shard: decoding target and context spans and encoding them (worker side).

A span that is a whole source file already in the output's form (mono 16-bit PCM, the output
container, the output rate) is copied through: the file's bytes go into the tar as they are, its
metadata stripped (only FLAC's STREAMINFO, WAV's fmt and data chunks are kept), so an embedded
picture or long tags never bloat the tar. Its decoded samples are those the encode path gives.
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
    copy_through: bool = True


@dataclass(frozen=True)
class EncodedAudio:
    data: bytes
    sampling_rate: int
    num_samples: int
    clipped: int
    padded: int
    copied: bool = False  # the source file's bytes, not decoded and encoded again


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
            audio = copy_through(full, offset, duration, settings) or encode_span(
                full, offset, duration, settings
            )
        except Exception as e:  # reported per cut; the shard goes on
            return reason, f"{path}: {e}"
        out.append(audio)
    return out[0], out[1]


def encode_span(path: str, offset: float, duration: float, settings: EncodeSettings) -> EncodedAudio:
    samples, rate, padded = read_span(path, offset, duration, settings.sample_rate)
    data, clipped = encode(samples, rate, settings.audio_format)
    return EncodedAudio(data, rate, len(samples), clipped, padded)


def copy_through(path: str, offset: float, duration: float, settings: EncodeSettings) -> EncodedAudio | None:
    """The file's own bytes (metadata stripped) if the span is all of it and already in the output's form.

    That is: flac or wav output; offset 0 and a duration of exactly the file's samples (as lhotse
    counts them); a mono 16-bit PCM file in that container at the output rate. Else None (encode
    it). The file is not decoded: its last sample is (a truncated or zero-filled FLAC fails there,
    and takes the encode path, which rejects it); damage inside a file is left to verify, which
    decodes every member.
    """
    if not settings.copy_through or settings.audio_format not in _STRIP or offset != 0:
        return None
    with sf.SoundFile(path) as f:
        if (
            f.format != settings.audio_format.upper()
            or f.subtype != "PCM_16"
            or f.channels != 1
            or (settings.sample_rate and settings.sample_rate != f.samplerate)
            or f.frames == 0
            or compute_num_samples(duration, f.samplerate) != f.frames
        ):
            return None
        rate, frames = f.samplerate, f.frames
        try:
            f.seek(frames - 1)
            if len(f.read(1, dtype="int16")) != 1:
                return None
        except sf.LibsndfileError:
            return None
    with open(path, "rb") as raw:
        data = _STRIP[settings.audio_format](raw.read())
    if data is None:
        return None
    return EncodedAudio(data, rate, frames, clipped=0, padded=0, copied=True)


def flac_without_metadata(data: bytes) -> bytes | None:
    """A FLAC file with only its STREAMINFO block kept (no tags, pictures, padding); None if not FLAC."""
    if data[:4] != b"fLaC":
        return None
    pos, streaminfo, last = 4, None, False
    while not last:
        if pos + 4 > len(data):
            return None
        last, kind = bool(data[pos] & 0x80), data[pos] & 0x7F
        length = int.from_bytes(data[pos + 1 : pos + 4], "big")
        if kind == 0:
            streaminfo = data[pos + 4 : pos + 4 + length]
        pos += 4 + length
    if streaminfo is None or len(streaminfo) != 34 or pos >= len(data):
        return None
    return b"fLaC" + bytes([0x80]) + len(streaminfo).to_bytes(3, "big") + streaminfo + data[pos:]


def wav_without_metadata(data: bytes) -> bytes | None:
    """A canonical PCM WAV (44-byte header) of the file's fmt and data chunks only; None if not PCM WAV."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, fmt, payload = 12, None, None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        if chunk == b"fmt ":
            fmt = data[pos + 8 : pos + 8 + size]
        elif chunk == b"data":
            payload = data[pos + 8 : pos + 8 + size]
        pos += 8 + size + (size & 1)
    if fmt is None or payload is None or len(fmt) < 16 or int.from_bytes(fmt[:2], "little") != 1:
        return None
    header = (
        b"WAVE"
        + b"fmt "
        + (16).to_bytes(4, "little")
        + fmt[:16]
        + b"data"
        + len(payload).to_bytes(4, "little")
    )
    return b"RIFF" + (len(header) + len(payload)).to_bytes(4, "little") + header + payload


_STRIP = {"flac": flac_without_metadata, "wav": wav_without_metadata}


def encode_records(settings: EncodeSettings, records: list[dict]) -> list:
    """encode_record over a batch of records: one task per batch keeps inter-process traffic low."""
    return [encode_record(settings, r) for r in records]
