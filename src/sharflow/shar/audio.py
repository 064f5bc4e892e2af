"""Audio of a Shar shard: decoding target and context spans and encoding them (worker side).

A span that is a whole source file already in the output's form (mono 16-bit PCM, the output
container, the output rate) is copied through: the file's bytes go into the tar as they are, its
metadata stripped (only FLAC's STREAMINFO, WAV's fmt and data chunks are kept), so an embedded
picture or long tags never bloat the tar. Its decoded samples are those the encode path gives.
Kept free of lhotse and torch so that worker processes start in a fraction of a second.
"""

import io
import os
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import soundfile as sf
import soxr

from sharflow.core.audio import resolve_audio_path

OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_MAX_PCM16_BYTES_PER_SECOND = 2 * 192_000  # mono 16-bit at the highest common rate, uncompressed
_MAX_METADATA_BYTES = 1 << 20
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
    it). The file is read once and not decoded; a FLAC must end in a frame whose header is intact
    and whose last sample is STREAMINFO's last (a zero-filled or truncated file fails this and
    takes the encode path, which rejects it). Damage inside a file is left to verify, which decodes
    every member.
    """
    if not settings.copy_through or settings.audio_format not in _STRIP or offset != 0:
        return None
    if os.path.getsize(path) > duration * _MAX_PCM16_BYTES_PER_SECOND + _MAX_METADATA_BYTES:
        return None  # too big to be this span alone (the first segment of a long file): do not read it all
    with open(path, "rb") as f:
        audio = _STRIP[settings.audio_format](f.read())
    if (
        audio is None
        or audio.channels != 1
        or audio.bits != 16
        or audio.frames == 0
        or (settings.sample_rate and settings.sample_rate != audio.rate)
        or compute_num_samples(duration, audio.rate) != audio.frames
    ):
        return None
    return EncodedAudio(audio.data, audio.rate, audio.frames, clipped=0, padded=0, copied=True)


@dataclass(frozen=True)
class Stripped:
    """An audio file without its metadata, and what its header says."""

    data: bytes
    rate: int
    channels: int
    bits: int
    frames: int


def flac_without_metadata(data: bytes) -> Stripped | None:
    """A FLAC file with only its STREAMINFO block kept (no tags, pictures, padding).

    None if it is not FLAC, or its last frame is not whole by its header (see _flac_ends_whole).
    """
    if data[:4] != b"fLaC":
        return None
    pos, info, last = 4, None, False
    while not last:
        if pos + 4 > len(data):
            return None
        last, kind = bool(data[pos] & 0x80), data[pos] & 0x7F
        length = int.from_bytes(data[pos + 1 : pos + 4], "big")
        if kind == 0:
            info = data[pos + 4 : pos + 4 + length]
        pos += 4 + length
    if info is None or len(info) != 34 or pos >= len(data):
        return None
    min_block, max_block = int.from_bytes(info[0:2], "big"), int.from_bytes(info[2:4], "big")
    rate = int.from_bytes(info[10:13], "big") >> 4
    channels = ((info[12] >> 1) & 0x07) + 1
    bits = (((info[12] & 0x01) << 4) | (info[13] >> 4)) + 1
    frames = ((info[13] & 0x0F) << 32) | int.from_bytes(info[14:18], "big")
    if not _flac_ends_whole(data, pos, min_block, max_block, frames):
        return None
    stripped = b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info + data[pos:]
    return Stripped(stripped, rate, channels, bits, frames)


def _flac_ends_whole(data: bytes, audio_start: int, min_block: int, max_block: int, frames: int) -> bool:
    """Whether the file ends in a whole frame (header CRC-8, frame CRC-16) whose last sample is `frames`."""
    end = len(data)
    while True:
        pos = max(data.rfind(b"\xff\xf8", audio_start, end), data.rfind(b"\xff\xf9", audio_start, end))
        if pos < 0:
            return False
        header = _flac_frame_header(data, pos)
        if header is not None:
            break
        end = pos + 1  # a sync pattern inside audio data: look further back
    variable, number, block = header
    if not variable and min_block != max_block:
        return False
    first = number if variable else number * max_block
    return first + block == frames and _crc16(data[pos:]) == 0  # the stored CRC-16 included


def _crc16(data: bytes) -> int:
    """FLAC's frame CRC-16 (polynomial x^16 + x^15 + x^2 + 1, initial 0); 0 over a frame with its CRC."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16_TABLE[(crc >> 8) ^ byte]
    return crc


def _flac_frame_header(data: bytes, pos: int) -> tuple[bool, int, int] | None:
    """(variable block size, frame or sample number, block size) of a frame header at `pos`, or None."""
    if pos + 6 > len(data) or data[pos + 3] & 0x01 or data[pos + 2] >> 4 == 0 or data[pos + 2] & 0x0F == 0x0F:
        return None
    i, lead = pos + 4, data[pos + 4]
    extra = next((n for n, top in enumerate((0x80, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF)) if lead < top), None)
    if extra is None or (extra == 0 and lead >= 0x80) or (extra > 0 and lead < 0xC0):
        return None
    number = lead & (0x7F >> extra) if extra else lead
    for k in range(1, extra + 1):
        if i + k >= len(data) or data[i + k] & 0xC0 != 0x80:
            return None
        number = (number << 6) | (data[i + k] & 0x3F)
    i += 1 + extra
    code = data[pos + 2] >> 4
    if code == 1:
        block = 192
    elif code <= 5:
        block = 576 << (code - 2)
    elif code == 6:
        block, i = data[i] + 1, i + 1
    elif code == 7:
        block, i = int.from_bytes(data[i : i + 2], "big") + 1, i + 2
    else:
        block = 256 << (code - 8)
    i += {12: 1, 13: 2, 14: 2}.get(data[pos + 2] & 0x0F, 0)
    if i >= len(data) or _crc8(data[pos:i]) != data[i]:
        return None
    return bool(data[pos + 1] & 0x01), number, block


def _crc8(data: bytes) -> int:
    """FLAC's frame-header CRC-8 (polynomial x^8 + x^2 + x + 1, initial 0)."""
    crc = 0
    for byte in data:
        crc = _CRC8_TABLE[crc ^ byte]
    return crc


def _crc_table(poly: int, bits: int) -> list[int]:
    """Table of a non-reflected CRC of `bits` bits with polynomial `poly`, one entry per byte."""
    top, mask, table = 1 << (bits - 1), (1 << bits) - 1, []
    for n in range(256):
        crc = n << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
        table.append(crc)
    return table


_CRC8_TABLE = _crc_table(0x07, 8)
_CRC16_TABLE = _crc_table(0x8005, 16)


def wav_without_metadata(data: bytes) -> Stripped | None:
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
            if len(payload) != size:  # truncated
                return None
        pos += 8 + size + (size & 1)
    if fmt is None or payload is None or len(fmt) < 16 or int.from_bytes(fmt[:2], "little") != 1:
        return None
    channels, rate = int.from_bytes(fmt[2:4], "little"), int.from_bytes(fmt[4:8], "little")
    bits = int.from_bytes(fmt[14:16], "little")
    frame_bytes = channels * bits // 8
    if not frame_bytes or len(payload) % frame_bytes:
        return None
    header = (
        b"WAVE"
        + b"fmt "
        + (16).to_bytes(4, "little")
        + fmt[:16]
        + b"data"
        + len(payload).to_bytes(4, "little")
    )
    data = b"RIFF" + (len(header) + len(payload)).to_bytes(4, "little") + header + payload
    return Stripped(data, rate, channels, bits, len(payload) // frame_bytes)


_STRIP = {"flac": flac_without_metadata, "wav": wav_without_metadata}
