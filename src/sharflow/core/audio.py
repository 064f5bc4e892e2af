"""Audio files of a dataset: resolving manifest paths inside the audio root, probing headers."""

import os
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import soundfile as sf
import soxr


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
    while `../x` or `/etc/x` is refused with PathEscapeError.
    """
    prefix = _root_prefix(audio_root)
    full = os.path.normpath(os.path.join(prefix, path))
    if full.startswith(prefix) and len(full) > len(prefix):
        return full, full[len(prefix) :].replace(os.sep, "/")
    raise PathEscapeError(f"{path!r} resolves to {full!r}, outside the audio root {prefix!r}")


@lru_cache(maxsize=64)
def _root_prefix(audio_root: str) -> str:
    """The absolute root with one trailing separator (so `/data/a2` is not inside `/data/a`)."""
    return os.path.join(os.path.abspath(audio_root), "")


def probe_audio(path: str) -> AudioInfo:
    """Read the header of an audio file (no samples are decoded)."""
    info = sf.info(path)
    return AudioInfo(int(info.samplerate), int(info.frames), int(info.channels))


def load_segment(path: str, offset: float, duration: float, sampling_rate: int | None = None) -> np.ndarray:
    """Decode only the span [offset, offset + duration) of a file as mono float32.

    Channels are averaged; with `sampling_rate`, the span is resampled to it (soxr, HQ). Raises
    ValueError if the span holds no samples.
    """
    with sf.SoundFile(path) as f:
        rate = f.samplerate
        f.seek(min(int(round(offset * rate)), f.frames))
        data = f.read(int(round(duration * rate)), dtype="float32", always_2d=True)
    if data.shape[0] == 0:
        raise ValueError(f"{path}: no samples at offset {offset} s")
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    return resample(mono, rate, sampling_rate) if sampling_rate is not None else np.ascontiguousarray(mono)


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Mono float32 audio at `target` Hz (soxr, HQ); contiguous, unchanged when the rates agree."""
    if target != rate:
        audio = soxr.resample(audio, rate, target, quality="HQ").astype(np.float32, copy=False)
    return np.ascontiguousarray(audio)
