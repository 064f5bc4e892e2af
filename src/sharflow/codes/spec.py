"""A codec as the codes jobs see it: its config entry resolved to a loadable model, and the model.

results/models/<codec>.json holds the resolved entry (CodecSpec): one small file per codec instead of
per-job parameters, so a codec's jobs rerun when it changes (by its time stamp) and the other
codecs' jobs do not. A process loads each codec once (cached_codec).
"""

import functools
import logging
from dataclasses import asdict, dataclass

from sharflow.core.atomic import read_json, write_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodecSpec:
    """One entry of `codecs:` in config, resolved to a loadable model."""

    name: str
    backend: str
    model: str
    precision: str = "fp32"


def write_codec_spec(spec: dict, out: str) -> CodecSpec:
    """results/models/<codec>.json: the resolved codec every codes job of that codec reads."""
    codec = CodecSpec(**spec)
    write_json(out, asdict(codec))
    log.info("codec %s: %s model %s (%s)", codec.name, codec.backend, codec.model, codec.precision)
    return codec


def read_codec_spec(path: str) -> CodecSpec:
    return CodecSpec(**read_json(path))


@functools.lru_cache(maxsize=4)
def cached_codec(codec: CodecSpec, device: str):
    """The codec model, loaded once per process and device."""
    from sharflow.models.codecs import load_codec

    return load_codec(codec.backend, codec.model, device, codec.precision)
