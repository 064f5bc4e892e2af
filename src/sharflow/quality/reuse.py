"""Measures kept from the last run: a grown corpus is measured only where it grew.

Every metrics line carries the `key` of what was measured: the record's audio span
(audio_filepath, offset, duration), its audio file's size and modification time (its ETag for an
object), the text its speaking rate counts and the ASR check scores against (normalized_text, else
text), and a digest of what every measure depends on besides the record (`measure_digest`): the
settings, the DNSMOS engine the rank's device runs, the version of sharflow's measures and of the
packages that measure. When the quality stage runs again (the manifest grew, a record was
removed), each part reads the dataset's metrics of the last run (the merge's output, still on
disk while the parts run) and keeps the lines whose key one of its records still has; only the
others are decoded and measured. Lines are matched by what was measured, not by line number or
name, so records inserted mid-manifest or moved to another part keep their measures, and a record
whose audio, span, text or settings changed is measured again. A line with an `error` (audio
that could not be decoded) is never kept: the record is tried again.

Memory: the keys of one part's records and the kept lines of that part.
"""

import hashlib
import json
import os
from collections.abc import Iterable, Iterator

from sharflow.core.cache import file_identity, package_versions
from sharflow.core.metrics import TEXT_METRICS
from sharflow.io import containers
from sharflow.models import speaker_embedders
from sharflow.quality.text import reference_text

# The version of how sharflow computes its measures: bump it when a metric's computation or rounding
# changes, so that a rerun measures again what an older sharflow measured (sharflow's own package
# version does not change with every commit).
MEASURES_VERSION = 2  # 2: DNSMOS batched, on torch on a GPU, 4 decimals; the VAD batched

MEASURING_PACKAGES = (
    "sharflow",
    "speechmos",
    "onnxruntime",
    "silero-vad",
    "torch",
    "pyloudnorm",
    "nemo_toolkit",
    "resemblyzer",
)


def measure_digest(settings, dnsmos_engine: str) -> str:
    """What every measure of a run depends on besides its record: the settings (less the audio root,
    which only says where the files are, and batch_seconds, which only groups records), the DNSMOS
    engine ("onnxruntime-cpu" or "torch-cuda": their scores differ in the last decimals; on a GPU also
    the VAD's float64, so an older run's spans, from TF32, are measured again), the
    context stage's speaker embedder and its options (a file by its size and time) and sharflow's
    EMBEDDING_VERSION, and the versions of sharflow's measures and of the measuring packages
    (resemblyzer's weights and NeMo's models among them)."""
    asr = settings.asr
    model = None
    if asr is not None:  # a model file by its size and time, not just its name
        model = {"model": file_identity(asr.model), "random": asr.random}
    parts = {
        "dnsmos_max_windows": settings.dnsmos_max_windows,
        "dnsmos_engine": dnsmos_engine,
        "asr": model,
        "measures": MEASURES_VERSION,
        "versions": package_versions(*MEASURING_PACKAGES),
    }
    if dnsmos_engine.endswith("cuda"):  # models.vad.GPU_DTYPE since 2026-11-30 (not imported: torch)
        parts["vad"] = "float64"
    embedder = getattr(settings, "embedder", None)
    if embedder is not None:  # the context stage's embeddings, measured in the same pass
        parts["embedder"] = {
            "name": file_identity(embedder.name),
            "options": [[k, file_identity(v)] for k, v in embedder.options],
            "version": speaker_embedders.EMBEDDING_VERSION,
        }
    return _digest(parts)


def record_key(record: dict, path: str, digest: str) -> str:
    """The key of one record's measures: its span, its file's size and time, the text its speaking
    rate and error rates are computed from, and the run's digest."""
    try:
        stamp = containers.stamp(path)
    except OSError:
        stamp = None  # unreadable: measured (and rejected) again next time
    what = [
        record["audio_filepath"],
        record["offset"],
        record["duration"],
        stamp,
        reference_text(record),
        digest,
    ]
    return _digest(what)


def kept_measures(previous: str | None, wanted: Iterable[str]) -> dict[str, dict]:
    """{key: metrics line} of the last run's lines (at `previous`, if there) whose key is wanted."""
    wanted = set(wanted)
    kept: dict[str, dict] = {}
    if not previous or not wanted or not os.path.exists(previous):
        return kept
    with open(previous, encoding="utf-8") as f:
        for text in f:
            if '"key"' not in text:
                continue  # a line of a sharflow that did not key its measures
            m = json.loads(text)
            if m.get("key") in wanted and "error" not in m:
                kept[m["key"]] = m
    return kept


def reused_lines(kept: dict[str, dict], keyed: Iterable[tuple[int, str, dict]]) -> Iterator[str]:
    """The kept measures of (line, key, record) as this run's lines, in the order given: the line
    number is this run's and the text metrics are the record's own (they are the text stage's)."""
    for line, key, record in keyed:
        m = dict(kept[key])
        m["line"] = line
        for name in TEXT_METRICS:
            if name in m:
                m[name] = record.get(name)
        yield json.dumps(m) + "\n"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:20]
