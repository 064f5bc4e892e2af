"""Lhotse manifests in: a CutSet, or a RecordingSet + SupervisionSet, as lhotse writes them.

Each supervision becomes one record in the form of a NeMo manifest line (audio_filepath, offset,
duration, text, speaker, lang, the supervision's custom fields), so that prepare's one set of checks
(sharflow.prepare.manifest.check_line) gives lhotse corpora the same prepared records and reject
reasons as NeMo manifests: a recording with several supervisions gives one utterance each, as a NeMo
manifest's segments with offsets do. What only a lhotse manifest can get wrong is refused here, with
its reason: audio that is not a file or URL (a `command` source is never run: sharflow runs no shell
command from a manifest; in-memory bytes, several sources, transforms), a supervision whose recording
is not in the recordings manifest, a cut that is not a MonoCut or holds no supervision.

The files are read as lhotse writes them (JSON lines, plain or gzipped), one line at a time. The
recordings of a SupervisionSet are looked up in an on-disk index (SQLite, built once per job in a
temporary folder), so memory stays bounded whatever the corpus's size. Records are numbered by
supervision (1, 2, ... in file order; a refused cut takes one number), and a reject's entry holds
the supervision (and its recording or cut id) as lhotse wrote it.
"""

import gzip
import json
import math
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sharflow.core.errors import SharflowError
from sharflow.io import storage
from sharflow.prepare.manifest import Refused
from sharflow.prepare.readers.common import LANGUAGE_CODE, RECORD_KEYS, Source, count_lines

CHUNK_RECORDS = 2048
_SOURCE_TYPES = ("file", "url")
# A supervision whose span is its recording's whole length within this is a whole-file record.
_WHOLE_FILE = 1e-6


@dataclass(frozen=True)
class LhotseManifest:
    """A lhotse manifest as prepare reads it: `path` holds cuts, or supervisions when `recordings`
    names their RecordingSet."""

    path: str
    recordings: str | None = None

    format = "lhotse"
    unit = "supervision"
    first = 1

    @classmethod
    def open(cls, source: Source) -> "LhotseManifest":
        """The manifest and its recordings, an object fetched into the object cache first."""
        if not source.fetch:
            return cls(source.manifest, source.recordings)
        return cls(
            storage.local_file(source.manifest), source.recordings and storage.local_file(source.recordings)
        )

    def most_records(self) -> int | None:
        """A SupervisionSet's lines (a supervision a line); None for cuts (a cut may hold several
        supervisions) and for an object (it is not fetched to count)."""
        if self.recordings is None or storage.is_url(self.path):
            return None
        return count_lines(self.path)

    def size(self) -> tuple[int | None, str]:
        """(total, unit) for a progress bar: records, counted as they come (the total is not known)."""
        return None, "record"

    def chunks(self, progress=None) -> Iterator[list[bytes | Refused]]:
        """Lists of at most CHUNK_RECORDS items, in file order: a record line in NeMo form, or Refused."""
        items = self._cut_items() if self.recordings is None else self._supervision_items()
        chunk: list[bytes | Refused] = []
        for item in items:
            chunk.append(item)
            if len(chunk) == CHUNK_RECORDS:
                _advance(progress, len(chunk))
                yield chunk
                chunk = []
        _advance(progress, len(chunk))
        if chunk:
            yield chunk

    def _cut_items(self) -> Iterator[bytes | Refused]:
        for _, raw, cut in _json_lines(self.path, "cut"):
            if isinstance(cut, Refused):
                yield cut
                continue
            kind = cut.get("type", "MonoCut")
            supervisions = cut.get("supervisions") or []
            recording = cut.get("recording")
            if kind != "MonoCut" or not isinstance(recording, dict):
                what = f"a {kind}" if kind != "MonoCut" else "a MonoCut without a recording"
                detail = f"cut {cut.get('id')!r} is {what}; sharflow reads MonoCuts over recordings"
                yield Refused("unsupported_cut", detail, raw)
                continue
            if not supervisions:
                detail = f"cut {cut.get('id')!r} holds no supervision (nothing to train on)"
                yield Refused("unsupported_cut", detail, raw)
                continue
            for sup in supervisions:
                yield supervision_record(sup, recording, cut.get("start", 0.0))

    def _supervision_items(self) -> Iterator[bytes | Refused]:
        with tempfile.TemporaryDirectory(prefix="sharflow-recordings-") as tmp:
            index = _RecordingIndex(self.recordings, Path(tmp) / "recordings.sqlite")
            try:
                for _, raw, sup in _json_lines(self.path, "supervision"):
                    if isinstance(sup, Refused):
                        yield sup
                        continue
                    recording = index.get(sup.get("recording_id"))
                    if recording is None:
                        detail = (
                            f"supervision {sup.get('id')!r}: recording {sup.get('recording_id')!r} is not in "
                            f"{self.recordings}"
                        )
                        yield Refused("missing_recording", detail, raw, _duration_of(sup))
                        continue
                    yield supervision_record(sup, recording)
            finally:
                index.close()


def supervision_record(sup: dict, recording: dict, cut_start: object = 0.0) -> bytes | Refused:
    """One supervision over its recording as a NeMo manifest line, or why it cannot be one.

    The offset is the cut's start plus the supervision's; a supervision that covers its whole
    recording gets no offset (a whole-file record, as in a NeMo manifest: prepare checks its duration
    against the file, and shar may copy the file through). Values of the wrong type are passed on for
    prepare's checks to reject with their reason.
    """
    original = json.dumps(sup, ensure_ascii=False).encode("utf-8")
    duration = sup.get("duration")
    source, why = _source(recording)
    if source is None:
        detail = f"supervision {sup.get('id')!r}, recording {recording.get('id')!r}: {why}"
        return Refused("unsupported_source", detail, original, _duration_of(sup))
    start = sup.get("start", 0.0)
    offset = start + cut_start if _number(start) and _number(cut_start) else start
    record: dict = {"audio_filepath": source}
    whole = _number(offset) and _number(duration) and _number(recording.get("duration"))
    if not (whole and offset == 0 and abs(duration - recording["duration"]) <= _WHOLE_FILE):
        record["offset"] = offset
    if duration is not None:
        record["duration"] = duration
    if sup.get("text") is not None:
        record["text"] = sup["text"]
    if sup.get("speaker") is not None:
        record["speaker"] = sup["speaker"]
    language = sup.get("language")
    if isinstance(language, str) and LANGUAGE_CODE.match(language):
        record["lang"] = language
    custom = sup.get("custom") or {}
    if isinstance(custom, dict):
        record.update({k: v for k, v in custom.items() if k not in RECORD_KEYS})
    return json.dumps(record, ensure_ascii=False).encode("utf-8")


def _source(recording: dict) -> tuple[str | None, str]:
    """(the recording's one file path or URL, "") or (None, why its audio is anything else)."""
    sources = recording.get("sources")
    if not isinstance(sources, list) or not sources:
        return None, "the recording has no audio source"
    if len(sources) > 1:
        return None, f"the recording has {len(sources)} sources (one per channel); sharflow reads one file"
    source = sources[0] if isinstance(sources[0], dict) else {}
    kind = source.get("type")
    if kind == "command":
        return (
            None,
            "its audio source is a command; sharflow runs no command from a manifest (decode to files)",
        )
    if kind not in _SOURCE_TYPES or not isinstance(source.get("source"), str) or not source["source"]:
        return None, f"its audio source is of type {kind!r}; sharflow reads a file or a URL"
    if recording.get("transforms"):
        names = ", ".join(
            str(t.get("name", t)) if isinstance(t, dict) else str(t) for t in recording["transforms"]
        )
        return None, f"the recording has transforms ({names}); give the audio as it is stored"
    return source["source"], ""


class _RecordingIndex:
    """Recording id -> the recording's JSON, on disk (one row per recording), read from a RecordingSet."""

    def __init__(self, path: str, db: Path):
        self.db = sqlite3.connect(db)
        self.db.execute("CREATE TABLE recordings (id TEXT PRIMARY KEY, line BLOB, number INTEGER)")
        for number, raw, recording in _json_lines(path, "recording"):
            if isinstance(recording, Refused) or not isinstance(recording.get("id"), str):
                detail = recording.detail if isinstance(recording, Refused) else "it has no id"
                raise SharflowError(
                    f"recordings manifest {path}, line {number}: {detail}; give the RecordingSet as lhotse "
                    "writes it (RecordingSet.to_file)"
                )
            try:
                self.db.execute("INSERT INTO recordings VALUES (?, ?, ?)", (recording["id"], raw, number))
            except sqlite3.IntegrityError:
                (earlier,) = self.db.execute(
                    "SELECT number FROM recordings WHERE id = ?", (recording["id"],)
                ).fetchone()
                raise SharflowError(
                    f"recordings manifest {path}: recording {recording['id']!r} on line {earlier} and again "
                    f"on line {number}; a RecordingSet holds each id once (fix the manifest)"
                ) from None

    def get(self, recording_id) -> dict | None:
        if not isinstance(recording_id, str):
            return None
        row = self.db.execute("SELECT line FROM recordings WHERE id = ?", (recording_id,)).fetchone()
        return json.loads(row[0]) if row else None

    def close(self) -> None:
        self.db.close()


def _json_lines(path: str, what: str) -> Iterator[tuple[int, bytes, dict | Refused]]:
    """(line number, raw line, the JSON object or Refused) for every line of a lhotse JSON-lines file."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as src:
            for number, line in enumerate(src, start=1):
                raw = line.rstrip(b"\r\n")
                try:
                    item = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as e:
                    item = Refused("malformed_json", f"{what} line {number} of {path}: {e}", raw)
                if not isinstance(item, (dict, Refused)):
                    item = Refused(
                        "not_an_object", f"{what} line {number} of {path} is not a JSON object", raw
                    )
                yield number, raw, item
    except (OSError, EOFError) as e:
        raise SharflowError(
            f"lhotse manifest {path}: not readable as {'gzip ' if path.endswith('.gz') else ''}JSON lines "
            f"({e}); lhotse manifests are read as .jsonl or .jsonl.gz (write them with to_file(...jsonl.gz))"
        ) from None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _duration_of(sup: dict) -> float | None:
    duration = sup.get("duration")
    return float(duration) if _number(duration) else None


def _advance(progress, records: int) -> None:
    if progress is not None and records:
        progress.update(records)
