"""Audio files of a dataset: paths inside the audio root, headers, and the one reading of a span."""

import io
import os
import posixpath
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from functools import lru_cache

import numpy as np
import soundfile as sf
import soxr

from sharflow.io import containers, storage

_EXACT_INT16 = {"PCM_16", "PCM_S8", "PCM_U8"}  # subtypes whose samples int16 holds exactly


class PathEscapeError(ValueError):
    """A manifest path points outside its dataset's audio root."""


@dataclass(frozen=True)
class AudioInfo:
    """What the file header says, in lhotse's Recording terms."""

    sampling_rate: int
    num_samples: int
    num_channels: int

    @property
    def duration(self) -> float:
        return self.num_samples / self.sampling_rate


def resolve_audio_path(audio_root: str, path: str) -> tuple[str, str]:
    """Resolve a manifest `audio_filepath` against the audio root.

    Returns (absolute path, path relative to the root in POSIX form). Relative paths are taken
    from the root; absolute ones must already lie under it. The check is lexical (after `..` is
    folded), so a root that is itself a symlink, or holds symlinked sub-folders, still works,
    while `../x` or `/etc/x` is refused with PathEscapeError. A URL root (`s3://bucket/audio`) takes
    paths relative to it or URLs under it, folded the same way (sharflow.io.storage). A member's
    address (`shard.tar#key.mp3`, sharflow.io.containers) resolves its container so.
    """
    container, member = containers.split_member(path)
    if member is not None:  # a member inside a container (sharflow.io.containers): the container's place
        full, rel = resolve_audio_path(audio_root, container)
        return containers.address(full, member), containers.address(rel, member)
    if storage.is_url(audio_root):
        return _resolve_url(audio_root, path)
    prefix = _root_prefix(audio_root)
    if storage.is_url(path):  # a lhotse url source, or a NeMo manifest's: not under a local root
        raise PathEscapeError(f"{path!r} is a URL, outside the local audio root {prefix!r}")
    full = os.path.normpath(os.path.join(prefix, path))
    if full.startswith(prefix) and len(full) > len(prefix):
        return full, full[len(prefix) :].replace(os.sep, "/")
    raise PathEscapeError(f"{path!r} resolves to {full!r}, outside the audio root {prefix!r}")


def _resolve_url(audio_root: str, path: str) -> tuple[str, str]:
    prefix = storage.normalize_url(audio_root) + "/"
    full = storage.normalize_url(path if storage.is_url(path) else prefix + path)
    if full.startswith(prefix) and not path.startswith("/") and len(full) > len(prefix):
        return full, full[len(prefix) :]
    raise PathEscapeError(f"{path!r} resolves to {full!r}, outside the audio root {prefix!r}")


@lru_cache(maxsize=64)
def _root_prefix(audio_root: str) -> str:
    """The absolute root with one trailing separator (so `/data/a2` is not inside `/data/a`)."""
    return os.path.join(os.path.abspath(audio_root), "")


def probe_audio(path: str) -> AudioInfo:
    """Read the header of an audio file, object or container member (no samples are decoded)."""
    with containers.audio_source(path) as source:
        return _header(source)


def probe_bytes(data: bytes) -> AudioInfo:
    """The header of audio a reader holds in memory (a member it streamed past, a Parquet cell)."""
    return _header(io.BytesIO(data))


def _header(source) -> AudioInfo:
    with sf.SoundFile(source) as f:  # not sf.info: it formats ten names we do not read
        return AudioInfo(int(f.samplerate), int(f.frames), int(f.channels))


def compute_num_samples(duration: float, sampling_rate: int) -> int:
    """Samples in `duration` seconds, rounded half up exactly as lhotse counts them."""
    return int(Decimal(round(duration * sampling_rate, ndigits=8)).quantize(0, rounding=ROUND_HALF_UP))


def read_span(
    path: str, offset: float, duration: float, sample_rate: int | None = None, *, floats: bool = False
) -> tuple[np.ndarray, int, int]:
    """Channel 0 of [offset, offset + duration), decoding only that span, as lhotse counts samples.

    The one reading of a record's audio: the shard stores these samples, and quality and context
    measure them (load_span). Returns (samples, rate, samples padded with zeros past the end of the
    file). Samples are int16 when the source is at most 16-bit and kept at its rate (an exact copy),
    else (or with `floats`) float32 in [-1, 1]. With `sample_rate`, the span is resampled (soxr HQ)
    and trimmed/padded to lhotse's count. Raises ValueError for a span of no samples.
    """
    with containers.audio_source(path) as source, sf.SoundFile(source) as f:
        rate = f.samplerate
        exact = not floats and f.subtype in _EXACT_INT16 and (not sample_rate or sample_rate == rate)
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


def load_span(path: str, offset: float, duration: float) -> tuple[np.ndarray, int]:
    """(float32 samples, rate) of the span as read_span reads it for the shard: what the models measure."""
    samples, rate, _ = read_span(path, offset, duration, floats=True)
    return samples, rate


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Mono float32 audio at `target` Hz (soxr, HQ); contiguous, unchanged when the rates agree."""
    if target != rate:
        audio = soxr.resample(audio, rate, target, quality="HQ").astype(np.float32, copy=False)
    return np.ascontiguousarray(audio)


@lru_cache(maxsize=65536)
def _file_size(path: str) -> int:
    """A file's size, stat'ed once for the many utterances of one long file (bounded cache)."""
    return containers.size(path)


def span_key(path: str, offset: float, duration: float) -> str:
    """An utterance's identity for splits: file name, its size in bytes, offset and duration (ms)."""
    return f"{posixpath.basename(path)}:{_file_size(path)}:{offset:.3f}:{duration:.3f}"
