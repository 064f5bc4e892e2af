"""A codec as the codes jobs see it: its config entry resolved to a loadable model, and the model.

results/models/<codec>.json holds the resolved entry (CodecSpec): one small file per codec instead of
per-job parameters, so a codec's jobs rerun when it changes (by its time stamp) and the other
codecs' jobs do not. A process loads each codec once (cached_codec).
"""

import functools
import logging
import time
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


LOAD_TIMES: dict[tuple[str, str], dict[str, float]] = {}  # (codec, device) -> seconds of each load step


@functools.lru_cache(maxsize=4)
def cached_codec(codec: CodecSpec, device: str):
    """The codec model, loaded once per process and device; each load is logged ("codec <name> loaded
    on <device>": one line per load, which tests count) with its framework import and restore times."""
    from sharflow.models.codecs import import_framework, load_codec

    start = time.perf_counter()
    import_framework(codec.backend)
    imported = time.perf_counter()
    model = load_codec(codec.backend, codec.model, device, codec.precision)
    times = {"import": imported - start, "restore": time.perf_counter() - imported}
    LOAD_TIMES[(codec.name, device)] = times
    log.info(
        "codec %s loaded on %s in %.1f s (%s import %.1f s, model restore %.1f s)",
        codec.name,
        device,
        sum(times.values()),
        codec.backend,
        times["import"],
        times["restore"],
    )
    return model
