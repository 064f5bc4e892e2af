"""sharflow.shar.headers: FLAC, WAV and MP3 files read from their bytes, checked against an independent
reading of the formats (FLAC's frame header and CRCs written out bit by bit here, crafted files)."""

import pytest

from sharflow.shar.headers import (
    _crc8,
    _crc16,
    _crc_table,
    _flac_ends_whole,
    _flac_frame_header,
    flac_without_metadata,
    mp3_without_metadata,
    wav_without_metadata,
)


def crc_bitwise(data: bytes, poly: int, bits: int) -> int:
    """A non-reflected CRC with initial value 0, one bit at a time (no table)."""
    crc, top, mask = 0, 1 << (bits - 1), (1 << bits) - 1
    for byte in data:
        crc ^= byte << (bits - 8)
        for _ in range(8):
            crc = ((crc << 1) ^ poly) & mask if crc & top else (crc << 1) & mask
    return crc


def test_crcs_are_flacs():
    assert _crc8(b"123456789") == 0xF4  # CRC-8 (x^8 + x^2 + x + 1), the catalogued check value
    assert _crc16(b"123456789") == 0xFEE8  # CRC-16/UMTS (x^16 + x^15 + x^2 + 1)
    for data in (b"", b"\x00", b"\xff\xf8\x69\x08\x00", bytes(range(256))):
        assert _crc8(data) == crc_bitwise(data, 0x07, 8)
        assert _crc16(data) == crc_bitwise(data, 0x8005, 16)
    # the tables themselves, entry by entry (they are built once, at import)
    assert _crc_table(0x07, 8) == [crc_bitwise(bytes([n]), 0x07, 8) for n in range(256)]
    assert _crc_table(0x8005, 16) == [crc_bitwise(bytes([n]), 0x8005, 16) for n in range(256)]
    frame = b"\xff\xf8 some frame"
    assert _crc16(frame + crc_bitwise(frame, 0x8005, 16).to_bytes(2, "big")) == 0


def coded_number(n: int) -> bytes:
    """FLAC's UTF-8-like coding of a frame or sample number (1 to 7 bytes)."""
    if n < 0x80:
        return bytes([n])
    extra = next(k for k in range(1, 7) if n < 1 << (5 * k + 6 + (k == 6)))
    lead = ((0xFF00 >> (extra + 1)) & 0xFF) | (n >> (6 * extra))
    return bytes([lead, *(0x80 | ((n >> (6 * k)) & 0x3F) for k in range(extra - 1, -1, -1))])


def frame_header(
    variable: bool,
    number: int,
    block_code: int,
    rate_code: int = 9,
    tail: bytes = b"",
    reserved: int = 0,
    number_bytes: bytes | None = None,
) -> bytes:
    """A frame header with its CRC-8: sync, block/rate codes, channels 0001 (stereo) and 16 bits."""
    head = bytes([0xFF, 0xF8 | variable, (block_code << 4) | rate_code, 0x18 | reserved])
    head += (coded_number(number) if number_bytes is None else number_bytes) + tail
    return head + bytes([crc_bitwise(head, 0x07, 8)])


@pytest.mark.parametrize(
    ("block_code", "tail", "block"),
    [
        (1, b"", 192),
        (2, b"", 576),
        (3, b"", 1152),
        (4, b"", 2304),
        (5, b"", 4608),
        (6, b"\x0f", 16),
        (7, b"\x0f\xff", 4096),
        (8, b"", 256),
        (12, b"", 4096),
        (15, b"", 32768),
    ],
)
def test_block_sizes_of_every_code(block_code, tail, block):
    assert _flac_frame_header(frame_header(False, 3, block_code, tail=tail), 0) == (False, 3, block)


@pytest.mark.parametrize(
    "number",
    [
        0,
        1,
        0x7F,
        0x80,
        0x7FF,
        0x800,
        0xFFFF,
        0x10000,
        0x1FFFFF,
        0x200000,
        0x3FFFFFF,
        0x4000000,
        0x7FFFFFFF,
        0x80000000,
        2**36 - 1,
    ],
)
def test_frame_and_sample_numbers_of_every_length(number):
    coded = coded_number(number)
    assert len(coded) == 1 + sum(
        number >= limit for limit in (0x80, 0x800, 0x10000, 0x200000, 0x4000000, 0x80000000)
    )
    assert _flac_frame_header(frame_header(True, number, 12), 0) == (True, number, 4096)
    # a header at an offset in a longer buffer, followed by anything
    data = b"junk" + frame_header(False, number, 8) + b"\x00\x01"
    assert _flac_frame_header(data, 4) == (False, number, 256)


@pytest.mark.parametrize(
    ("rate_code", "tail"),
    [(0, b""), (9, b""), (11, b""), (12, b"\x30"), (13, b"\xac\x44"), (14, b"\x11\x94")],
)
def test_sample_rate_codes_that_carry_bytes(rate_code, tail):
    header = frame_header(False, 5, 7, rate_code, tail=b"\x01\x00" + tail)
    assert _flac_frame_header(header, 0) == (False, 5, 257)
    if tail:  # the rate's bytes are part of what the CRC-8 covers: one short, and the header fails
        assert (
            _flac_frame_header(frame_header(False, 5, 7, rate_code, tail=b"\x01\x00" + tail[:-1]), 0) is None
        )


@pytest.mark.parametrize(
    "damage",
    [
        "reserved bit",
        "block code 0",
        "rate code 15",
        "continuation lead",
        "continuation lead, crc right",
        "lead 0xff",
        "bad continuation",
        "number cut short",
        "wrong crc",
        "truncated",
        "short",
    ],
)
def test_headers_that_are_not_frames_are_refused(damage):
    good = frame_header(False, 0x800, 12)
    assert _flac_frame_header(good, 0) == (False, 0x800, 4096)
    bad = {
        "reserved bit": frame_header(False, 0x800, 12, reserved=1),
        "block code 0": frame_header(False, 0x800, 0),
        "rate code 15": frame_header(False, 0x800, 12, rate_code=15),
        "continuation lead": frame_header(False, 0, 12, number_bytes=b"\x80"),
        "continuation lead, crc right": frame_header(False, 0, 12, number_bytes=b"\xbf\x80"),
        "lead 0xff": frame_header(False, 0, 12, number_bytes=b"\xff\x80\x80\x80\x80\x80\x80"),
        "number cut short": bytes([0xFF, 0xF8, 0xC9, 0x18, 0xE0, 0x80]),  # a 3-byte number, 2 there
        "bad continuation": frame_header(False, 0, 12, number_bytes=b"\xe0\x80\x00"),
        "wrong crc": good[:-1] + bytes([good[-1] ^ 1]),
        "truncated": good[:-1],
        "short": good[:5],
    }[damage]
    assert _flac_frame_header(bad, 0) is None


def test_an_overlong_number_is_read_as_its_value():
    """0xC0 0x80 is 0 in two bytes: FLAC's coding allows it (the lowest 2-byte lead, 0xC0, is a lead)."""
    assert _flac_frame_header(frame_header(False, 0, 12, number_bytes=b"\xc0\x80"), 0) == (False, 0, 4096)
    assert _flac_frame_header(frame_header(True, 5, 12, number_bytes=b"\xe0\x80\x85"), 0) == (True, 5, 4096)


def streaminfo(min_block: int, max_block: int, rate: int, channels: int, bits: int, frames: int) -> bytes:
    packed = (rate << 44) | ((channels - 1) << 41) | ((bits - 1) << 36) | frames
    return (
        min_block.to_bytes(2, "big")
        + max_block.to_bytes(2, "big")
        + bytes(6)
        + packed.to_bytes(8, "big")
        + bytes(16)
    )


def block(kind: int, body: bytes, last: bool = False) -> bytes:
    return bytes([kind | (0x80 if last else 0)]) + len(body).to_bytes(3, "big") + body


def frame(header: bytes, payload: bytes) -> bytes:
    body = header + payload
    return body + crc_bitwise(body, 0x8005, 16).to_bytes(2, "big")


def flac_file(info: bytes, frames: list[bytes], extra_blocks=()) -> bytes:
    blocks = [block(0, info, last=not extra_blocks)]
    blocks += [
        block(kind, body, last=i == len(extra_blocks) - 1) for i, (kind, body) in enumerate(extra_blocks)
    ]
    return b"fLaC" + b"".join(blocks) + b"".join(frames)


TAGS = ((4, b"\x05\x00\x00\x00title" + bytes(30)), (6, bytes(500)), (1, bytes(1000)))


def test_a_flac_keeps_its_streaminfo_and_frames_only():
    total = 6 * 2**32 + 0x3456789A  # a 36-bit sample count, every byte of it set
    last_number, last_block = (total - 1000) // 4096, (total - 1000) % 4096 + 1000
    assert last_number * 4096 + last_block == total
    info = streaminfo(4096, 4096, 44100, 2, 24, total)
    frames = [
        frame(frame_header(False, 0, 12), b"\xff\xf8 audio with a sync pattern inside"),
        frame(
            frame_header(False, last_number, 7, tail=(last_block - 1).to_bytes(2, "big")),
            b"last \xff\xf8\x00\x00 (a sync pattern that is no header)",
        ),
    ]
    for tags in (TAGS, TAGS[::-1]):  # padding (type 1) last, then first: the last-block flag is bit 7 alone
        stripped = flac_without_metadata(flac_file(info, frames, tags))
        shown = (stripped.rate, stripped.channels, stripped.bits, stripped.frames)
        assert shown == (44100, 2, 24, total)
        assert stripped.data == b"fLaC" + block(0, info, last=True) + b"".join(frames)
    assert flac_without_metadata(flac_file(info, frames)).data == stripped.data  # already bare


@pytest.mark.parametrize(
    "damage",
    [
        "not flac",
        "no streaminfo",
        "streaminfo 33 bytes",
        "blocks past the end",
        "no audio",
        "fewer samples",
        "frame crc",
        "fixed size with min != max",
        "no frame",
    ],
)
def test_a_flac_that_is_not_whole_is_refused(damage):
    info = streaminfo(4096, 4096, 16000, 1, 16, 3 * 4096)
    last = frame(frame_header(False, 2, 12), b"payload")
    data = {
        "not flac": b"fLaX" + flac_file(info, [last])[4:],
        "no streaminfo": b"fLaC" + block(4, b"tags", last=True) + last,
        "streaminfo 33 bytes": b"fLaC" + block(0, info[:33], last=True) + last,
        "blocks past the end": b"fLaC" + block(0, info) + b"\x04\x00",
        "no audio": flac_file(info, []),
        "fewer samples": flac_file(streaminfo(4096, 4096, 16000, 1, 16, 3 * 4096 + 1), [last]),
        "frame crc": flac_file(info, [last[:-1] + bytes([last[-1] ^ 1])]),
        "fixed size with min != max": flac_file(streaminfo(1024, 4096, 16000, 1, 16, 3 * 4096), [last]),
        "no frame": flac_file(info, [b"no sync here at all"]),
    }[damage]
    assert flac_file(info, [last]) != data and flac_without_metadata(flac_file(info, [last])) is not None
    assert flac_without_metadata(data) is None


def test_a_variable_block_frame_counts_samples_not_frames():
    info = streaminfo(16, 4096, 16000, 1, 16, 10_000 + 192)
    frames = [
        frame(frame_header(True, 0, 12), b"first"),
        frame(frame_header(True, 10_000, 1), b"p \xff\xf9\x00\x00 (a sync pattern that is no header)"),
    ]
    assert _flac_ends_whole(flac_file(info, frames), 42, 16, 4096, 10_000 + 192)  # the last frame counts
    assert not _flac_ends_whole(flac_file(info, frames), 42, 16, 4096, 10_000 + 191)
    assert not _flac_ends_whole(flac_file(info, frames), 42, 16, 4096, 4096)


def chunk(name: bytes, body: bytes) -> bytes:
    return name + len(body).to_bytes(4, "little") + body + (b"\x00" if len(body) % 2 else b"")


def fmt(tag=1, channels=1, rate=22050, bits=16, extra=b"") -> bytes:
    block_align = channels * bits // 8
    return (
        tag.to_bytes(2, "little")
        + channels.to_bytes(2, "little")
        + rate.to_bytes(4, "little")
        + (rate * block_align).to_bytes(4, "little")
        + block_align.to_bytes(2, "little")
        + bits.to_bytes(2, "little")
        + extra
    )


def wav(*chunks: bytes) -> bytes:
    body = b"WAVE" + b"".join(chunks)
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def test_a_wav_becomes_a_canonical_header_and_its_samples():
    samples = bytes(range(200)) * 3
    data = wav(
        chunk(b"LIST", b"odd"),
        chunk(b"fmt ", fmt(channels=2, rate=48000, extra=b"\x02\x00\xab\xcd")),
        chunk(b"data", samples),
        chunk(b"junk", bytes(9)),
    )
    stripped = wav_without_metadata(data)
    assert (stripped.rate, stripped.channels, stripped.bits, stripped.frames) == (48000, 2, 16, 150)
    assert type(stripped.frames) is int
    canonical = wav(chunk(b"fmt ", fmt(channels=2, rate=48000)), chunk(b"data", samples))
    assert stripped.data == canonical and len(canonical) == 44 + 600
    assert wav_without_metadata(canonical).data == canonical
    empty = wav_without_metadata(wav(chunk(b"fmt ", fmt()), chunk(b"data", b"")))  # the last chunk, empty
    assert empty is not None and empty.frames == 0


@pytest.mark.parametrize(
    "damage",
    [
        "not riff",
        "not wave",
        "float",
        "fmt too short",
        "no fmt",
        "no data",
        "truncated data",
        "zero frame bytes",
        "partial frame",
    ],
)
def test_wavs_that_are_not_plain_pcm_are_refused(damage):
    samples = bytes(64)
    data = {
        "not riff": b"RIFX" + wav(chunk(b"fmt ", fmt()), chunk(b"data", samples))[4:],
        "not wave": wav(chunk(b"fmt ", fmt()), chunk(b"data", samples)).replace(b"WAVE", b"WAVX"),
        "float": wav(chunk(b"fmt ", fmt(tag=3, bits=32)), chunk(b"data", samples)),
        "fmt too short": wav(chunk(b"fmt ", fmt()[:15]), chunk(b"data", samples)),
        "no fmt": wav(chunk(b"data", samples)),
        "no data": wav(chunk(b"fmt ", fmt())),
        "truncated data": wav(chunk(b"fmt ", fmt()), chunk(b"data", samples))[:-3],
        "zero frame bytes": wav(chunk(b"fmt ", fmt(bits=4)), chunk(b"data", samples)),
        "partial frame": wav(chunk(b"fmt ", fmt(channels=3)), chunk(b"data", samples[:62])),
    }[damage]
    assert wav_without_metadata(wav(chunk(b"fmt ", fmt()), chunk(b"data", samples))) is not None
    assert wav_without_metadata(data) is None


def test_an_mp3_loses_its_tags_and_must_decode_to_the_samples_it_states():
    """An ID3v2 tag (with a footer) and an ID3v1 tag are dropped; the stream is kept as it is. A file
    cut short still states the whole length in its LAME/Xing header, and is refused."""
    import io

    import numpy as np
    import soundfile as sf

    from sharflow.shar.audio import encode

    tone = (0.3 * np.sin(np.arange(38720) / 10)).astype(np.float32)
    stream = encode(tone, 16000, "mp3")[0]
    tagged = (
        b"ID3\x04\x00\x10" + bytes([0, 0, 0, 4]) + b"abcd" + b"3DI" + bytes(7) + stream + b"TAG" + bytes(125)
    )
    got = mp3_without_metadata(tagged)
    assert (
        got is not None and got.data == stream and (got.rate, got.channels, got.frames) == (16000, 1, 38720)
    )
    assert got.bits is None
    half = stream[: len(stream) // 2]
    assert sf.info(io.BytesIO(half)).frames == 38720  # what the header says of a file cut in half
    assert mp3_without_metadata(half) is None
    flac = io.BytesIO()
    sf.write(flac, tone, 16000, format="FLAC")
    assert mp3_without_metadata(flac.getvalue()) is None and mp3_without_metadata(b"ID3") is None
