"""Audio files of a dataset: resolving manifest paths inside the audio root, probing headers."""

import os
from dataclasses import dataclass
from functools import lru_cache

import soundfile as sf


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
        return full, full[len(prefix):].replace(os.sep, "/")
    raise PathEscapeError(f"{path!r} resolves to {full!r}, outside the audio root {prefix!r}")


@lru_cache(maxsize=64)
def _root_prefix(audio_root: str) -> str:
    """The absolute root with one trailing separator (so `/data/a2` is not inside `/data/a`)."""
    return os.path.join(os.path.abspath(audio_root), "")


def probe_audio(path: str) -> AudioInfo:
    """Read the header of an audio file (no samples are decoded)."""
    info = sf.info(path)
    return AudioInfo(int(info.samplerate), int(info.frames), int(info.channels))
