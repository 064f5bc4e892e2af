"""Audio files without their metadata, for copy-through (sharflow.shar.audio.copy_through).

A FLAC keeps only its STREAMINFO block and must end in a whole frame (header CRC-8, frame CRC-16) whose
last sample is STREAMINFO's last; a WAV becomes a canonical 44-byte-header PCM file of its fmt and data
chunks: both read from their headers, without decoding. An MP3 loses its ID3v2 tags (where pictures
live) and its ID3v1 tag, and is decoded once: its LAME/Xing header states the stream's length, and a
truncated file still states the whole one (measured: a file cut in half says 38,720 samples and
decodes to 17,327), so only a full decode proves the samples are there.
"""

import io
from dataclasses import dataclass

import soundfile as sf


@dataclass(frozen=True)
class Stripped:
    """An audio file without its metadata, and what its header says."""

    data: bytes
    rate: int
    channels: int
    bits: int | None  # None: a compressed stream (MP3), which has no sample width
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
    # the number's length from its lead byte (UTF-8's coding, up to 7 bytes); 10xxxxxx or 0xFF cannot lead
    extra = next((n for n, top in enumerate((0x80, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE, 0xFF)) if lead < top), None)
    if extra is None or (extra > 0 and lead < 0xC0):
        return None
    number = lead & (0x7F >> extra)
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


def mp3_without_metadata(data: bytes) -> Stripped | None:
    """An MP3 stream without its ID3 tags; None if it is not MP3, or does not decode to the number of
    samples its header states."""
    start = 0
    while data[start : start + 3] == b"ID3" and len(data) >= start + 10:  # ID3v2, sizes syncsafe
        size = sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(data[start + 6 : start + 10]))
        start += 10 + size + (10 if data[start + 5] & 0x10 else 0)  # a footer
    end = len(data) - 128 if len(data) - start >= 128 and data[-128:-125] == b"TAG" else len(data)
    body = data[start:end]
    if len(body) < 4 or body[0] != 0xFF or body[1] & 0xE0 != 0xE0:  # an MPEG frame's sync word
        return None
    try:
        with sf.SoundFile(io.BytesIO(body)) as f:
            if f.format != "MP3":
                return None
            rate, channels, frames = f.samplerate, f.channels, f.frames
            decoded = len(f.read(dtype="int16"))
    except (sf.LibsndfileError, RuntimeError):
        return None
    if decoded != frames:
        return None
    return Stripped(body, rate, channels, None, frames)


STRIP = {"flac": flac_without_metadata, "wav": wav_without_metadata, "mp3": mp3_without_metadata}
