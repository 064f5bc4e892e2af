"""What the explorer plays and draws: a cut's audio from its shard, a reject's from its source, and a
picture of its waveform over its spectrogram, each within a byte bound.

A kept cut's audio is its Shar member's bytes, read by the member's offset in the tar through the tar
index every stage reads containers with (sharflow.io.containers): nothing is extracted or copied, and
the bytes go to the browser as they are (FLAC plays in every browser). A record the run dropped has no
shard: its span is read from its source through the reader every stage uses (sharflow.io.audio),
clamped to what the file holds (a record's duration is the record's word, not the file's), and sent as
16-bit WAV.
"""

import io
import math

import numpy as np
import soundfile as sf

from sharflow.io import containers
from sharflow.io.audio import compute_num_samples, probe_audio, read_span

MIME = {
    "flac": "audio/flac",
    "wav": "audio/wav",
    "opus": "audio/ogg",
    "ogg": "audio/ogg",
    "mp3": "audio/mpeg",
}
PICTURE_SIZE = (7.0, 3.2)  # inches at 100 dpi
_WAV_HEADER = 44


class SpanError(ValueError):
    """A span that cannot be played (not a number, none of the file, more than an answer's bytes)."""


class TooLarge(SpanError):
    """Audio of more bytes than one answer may hold."""


def member_bytes(address: str, max_bytes: int) -> tuple[bytes, str]:
    """(bytes, MIME type) of a Shar member (tar#member), read in place by its offset; TooLarge past
    `max_bytes` (nothing more than that is read)."""
    with containers.open_audio(address) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"the clip is more than {max_bytes >> 20} MB, more than the explorer sends at once")
    return data, MIME.get(address.rsplit(".", 1)[-1], "application/octet-stream")


def span_wav(path: str, offset: float, duration: float, max_bytes: int) -> bytes:
    """The span [offset, offset + duration) of the audio at `path` (file, object or member), clamped to
    the file, as WAV of at most `max_bytes`; SpanError for a span that is not finite, not positive,
    past the file's end or too long."""
    if not (math.isfinite(offset) and math.isfinite(duration)) or offset < 0 or duration <= 0:
        raise SpanError(f"a span is an offset >= 0 s and a duration > 0 s, not {offset}, {duration}")
    info = probe_audio(path)
    if compute_num_samples(offset, info.sampling_rate) >= info.num_samples:
        raise SpanError(f"the span starts at {offset:g} s, past the end of its audio ({info.duration:.3f} s)")
    duration = min(duration, info.duration - offset)
    most = (max_bytes - _WAV_HEADER) // 2 / info.sampling_rate
    if duration > most:
        raise TooLarge(f"the span is {duration:.1f} s; the explorer plays at most {most:.1f} s of it at once")
    try:
        samples, rate, _ = read_span(path, offset, duration)
    except ValueError as e:  # no sample in what is left of the file
        raise SpanError(str(e)) from None
    out = io.BytesIO()
    sf.write(out, samples, rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def decode(data: bytes) -> tuple[np.ndarray, int]:
    """(mono float32 samples, rate) of encoded audio bytes."""
    samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    return samples[:, 0], rate


def picture(samples: np.ndarray, rate: int, title: str = "") -> bytes:
    """A PNG of the waveform above the spectrogram (dB, 25 ms Hann windows, 10 ms hop)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=PICTURE_SIZE, dpi=100)
    wave, spec = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 2]})
    times = np.arange(len(samples)) / rate
    wave.plot(times, samples, linewidth=0.4, color="#1f77b4")
    wave.set_ylim(-1, 1)
    wave.set_ylabel("amplitude")
    if title:
        wave.set_title(title, fontsize=9)
    window = max(int(0.025 * rate), 16)
    if len(samples) >= window:
        spec.specgram(samples, NFFT=window, Fs=rate, noverlap=window - int(0.010 * rate), cmap="magma")
    spec.set_ylabel("Hz")
    spec.set_xlabel("seconds")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()
