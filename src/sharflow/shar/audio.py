"""Audio of a Shar shard: the target and context spans of a record, read and encoded (worker side).

Every span is read by sharflow.io.audio.read_span (channel 0, samples counted as lhotse counts
them), the reading quality and context measure too.

A span that is a whole source file already in the output's form (mono 16-bit PCM in the output
container, or mono MP3 for mp3 output, at the output rate) is copied through: the file's bytes go
into the tar as they are, its metadata stripped (sharflow.shar.headers), so an embedded picture or
long tags never bloat the tar. A copied FLAC or WAV decodes to the samples the encode path gives; a
copied MP3 to the source's own samples (the encode path would be a second lossy generation).
Kept free of lhotse and torch so that worker processes start in a fraction of a second.
"""

import io
from dataclasses import dataclass

import numpy as np
import soundfile as sf

from sharflow.io import containers
from sharflow.io.audio import compute_num_samples, read_span, resolve_audio_path
from sharflow.shar.headers import STRIP

LOSSY = {
    "opus": {"format": "OGG", "subtype": "OPUS"},
    "mp3": {"format": "MP3", "subtype": "MPEG_LAYER_III"},
}
_MAX_PCM16_BYTES_PER_SECOND = 2 * 192_000  # mono 16-bit at the highest common rate, uncompressed
_MAX_METADATA_BYTES = 1 << 20


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


def encode(samples: np.ndarray, rate: int, audio_format: str) -> tuple[bytes, int]:
    """Encode mono samples (int16, or float32 in [-1, 1]); returns (bytes, samples clipped).

    flac and wav are 16-bit PCM: int16 input is written as it is; float input is rounded to the
    nearest step of 1/32768, so a 16-bit signal survives bit-exactly either way. Float samples
    beyond [-1, 1] are clipped and counted. opus and mp3 are lossy.
    """
    buf = io.BytesIO()
    if samples.dtype == np.int16:
        clipped = 0
        if audio_format in LOSSY:
            sf.write(buf, samples.astype(np.float32) / 32768.0, rate, **LOSSY[audio_format])
        else:
            sf.write(buf, samples, rate, format=audio_format, subtype="PCM_16")
        return buf.getvalue(), clipped
    clipped = int(np.count_nonzero(np.abs(samples) > 1.0))
    if audio_format in LOSSY:
        sf.write(buf, np.clip(samples, -1.0, 1.0), rate, **LOSSY[audio_format])
    else:
        pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
        sf.write(buf, pcm, rate, format=audio_format, subtype="PCM_16")
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

    That is: flac, wav or mp3 output; offset 0 and a duration of exactly the file's samples (as lhotse
    counts them); a mono file in that container (16-bit PCM for flac and wav) at the output rate.
    Else None (encode it). A FLAC or WAV is read once and not decoded; a FLAC must end in a frame
    whose header is intact and whose last sample is STREAMINFO's last (a zero-filled or truncated
    file fails this and takes the encode path, which rejects it). An MP3 is decoded once, to prove
    its samples are there (sharflow.shar.headers). Damage inside a file is left to verify, which
    decodes every member.
    """
    if not settings.copy_through or settings.audio_format not in STRIP or offset != 0:
        return None
    if containers.size(path) > duration * _MAX_PCM16_BYTES_PER_SECOND + _MAX_METADATA_BYTES:
        return None  # too big to be this span alone (the first segment of a long file): do not read it all
    with containers.open_audio(path) as f:
        audio = STRIP[settings.audio_format](f.read())
    if (
        audio is None
        or audio.channels != 1
        or audio.bits not in (16, None)
        or audio.frames == 0
        or (settings.sample_rate and settings.sample_rate != audio.rate)
        or compute_num_samples(duration, audio.rate) != audio.frames
    ):
        return None
    return EncodedAudio(audio.data, audio.rate, audio.frames, clipped=0, padded=0, copied=True)
