"""Measures kept from the last run: a grown corpus is measured only where it grew.

Every metrics line carries the `key` of what was measured: the record's audio span
(audio_filepath, offset, duration), its audio file's size and modification time, its text where
the ASR check scores it, and a digest of the measuring settings and the versions of the packages
that measure (`measure_digest`). When the quality stage runs again (the manifest grew, a record was
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

from sharflow.core import storage
from sharflow.core.cache import package_versions
from sharflow.core.metrics import TEXT_METRICS

MEASURING_PACKAGES = (
    "sharflow",
    "speechmos",
    "onnxruntime",
    "silero-vad",
    "torch",
    "pyloudnorm",
    "nemo_toolkit",
)


def measure_digest(settings) -> str:
    """What every measure of a run depends on besides its record: the settings (less the audio
    root, which only says where the files are) and the measuring packages' versions."""
    asr = settings.asr
    model = None
    if asr is not None:
        model = {"model": asr.model, "random": asr.random}
        if os.path.exists(asr.model):  # a model file: its size and time, not just its name
            st = os.stat(asr.model)
            model["file"] = [st.st_size, st.st_mtime_ns]
    parts = {
        "dnsmos_max_windows": settings.dnsmos_max_windows,
        "asr": model,
        "versions": package_versions(*MEASURING_PACKAGES),
    }
    return _digest(parts)


def record_key(record: dict, path: str, digest: str, asr: bool) -> str:
    """The key of one record's measures: its span, its file's size and time, its text under ASR."""
    try:
        stamp = storage.stamp(path)
    except OSError:
        stamp = None  # unreadable: measured (and rejected) again next time
    what = [record["audio_filepath"], record["offset"], record["duration"], stamp, digest]
    if asr:
        what += [record.get("text"), record.get("normalized_text")]
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
