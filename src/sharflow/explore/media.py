"""What the explorer plays and draws: a cut's audio from its shard, a reject's from its source, and a
picture of its waveform over its spectrogram.

A kept cut's audio is its Shar member's bytes, read by the member's offset in the tar through the tar
index every stage reads containers with (sharflow.core.containers): nothing is extracted or copied, and
the bytes go to the browser as they are (FLAC plays in every browser). A record the run dropped has no
shard: its span is read from its source through the reader every stage uses (sharflow.core.audio) and
sent as 16-bit WAV.
"""

import io

import numpy as np
import soundfile as sf

from sharflow.core import containers
from sharflow.core.audio import read_span

MIME = {
    "flac": "audio/flac",
    "wav": "audio/wav",
    "opus": "audio/ogg",
    "ogg": "audio/ogg",
    "mp3": "audio/mpeg",
}
PICTURE_SIZE = (7.0, 3.2)  # inches at 100 dpi


def member_bytes(address: str) -> tuple[bytes, str]:
    """(bytes, MIME type) of a Shar member (tar#member), read in place by its offset."""
    with containers.open_audio(address) as f:
        data = f.read()
    return data, MIME.get(address.rsplit(".", 1)[-1], "application/octet-stream")


def span_wav(path: str, offset: float, duration: float) -> bytes:
    """The span [offset, offset + duration) of the audio at `path` (file, object or member), as WAV."""
    samples, rate, _ = read_span(path, offset, duration)
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
