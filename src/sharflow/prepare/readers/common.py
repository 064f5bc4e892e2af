"""What prepare's readers share: what a reader is opened from, the field mapping of samples and rows,
and a row as a JSON line. Every reader (sharflow.prepare.readers) may import this module; no reader
imports another reader.

A reader turns a corpus form into one thing, chunks of records in the form of NeMo manifest lines
(or `Refused` with its reason), so that prepare's one set of checks
(sharflow.prepare.manifest.check_line) gives every form the same prepared records and reject reasons.
"""

import datetime
import decimal
import json
import re
from dataclasses import dataclass, field

from sharflow.core.errors import SharflowError
from sharflow.io import containers

# A language becomes the record's lang only when it is a language code (ISO 639, maybe with a
# region): recipes that write names ("English") leave it to datasets.<name>.language.
LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}([-_][A-Za-z0-9]+)?$")
# What the record sets itself from a supervision, sample or row; a field of these names in the
# source's own extra fields is not carried over.
RECORD_KEYS = ("audio_filepath", "offset", "duration", "text", "speaker", "lang", "source_audio")
# the record fields a mapping names, and the names they have in a sample's JSON or a row by default
# (Emilia's)
MAPPED = {"text": "text", "speaker": "speaker", "duration": "duration", "language": "language"}


@dataclass(frozen=True)
class Mapping:
    """Where a sample's JSON (or a Parquet row) keeps each record field, and which of its other fields
    ride along (None: all of them)."""

    fields: dict = field(default_factory=dict)
    extra_fields: tuple | None = None

    def record(self, metadata: dict) -> dict:
        names = {**MAPPED, **self.fields}
        record = {}
        for ours in ("text", "speaker", "duration"):
            if metadata.get(names[ours]) is not None:
                record[ours] = metadata[names[ours]]
        language = metadata.get(names["language"])
        if isinstance(language, str) and LANGUAGE_CODE.match(language):
            record["lang"] = language
        taken = set(names.values()) | {self.fields.get("audio", "audio")}
        extra = (
            metadata
            if self.extra_fields is None
            else {k: metadata[k] for k in self.extra_fields if k in metadata}
        )
        record.update({k: v for k, v in extra.items() if k not in taken and k not in RECORD_KEYS})
        return record


@dataclass(frozen=True)
class Source:
    """What a reader is opened from (a dataset's config, as prepare's job hands it over).

    `manifest`: the manifest, or the pattern, folder or file of a form's containers; `required`: the
    record fields whose columns a table must have; `fetch`: whether an object on storage may be
    fetched (False for a dry run's count, which reads only what lies here)."""

    manifest: str
    audio_root: str
    recordings: str | None = None
    mapping: Mapping = field(default_factory=Mapping)
    required: tuple = ("text", "speaker")
    fetch: bool = True


def container_files(source: Source, suffix: str, what: str) -> tuple:
    """The container files of a source's pattern, folder or file (containers.expand_shards), or the
    error naming the manifest key to fix when there are none."""
    files = containers.expand_shards(source.manifest, source.audio_root, suffix)
    if not files:
        raise SharflowError(f"manifest {source.manifest!r}: no {what} there; fix datasets.<name>.manifest")
    return tuple(files)


def row_line(row: dict) -> bytes:
    """A row of a table as the JSON object line a JSON-lines manifest would hold (nulls left out)."""
    record = {k: v for k, v in row.items() if v is not None}
    return json.dumps(record, ensure_ascii=False, default=_json_value).encode("utf-8")


def _json_value(value):
    """JSON for the Parquet values json cannot write: decimals as numbers, dates and times as ISO
    text, bytes as text."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        return str(value) if isinstance(value, datetime.timedelta) else value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def count_lines(path: str) -> int:
    """The records a JSON-lines file (plain or gzip) can hold at most: its lines, read in blocks."""
    import gzip

    lines, last = 0, b"\n"
    with open(path, "rb") as raw:
        src = gzip.GzipFile(fileobj=raw, mode="rb") if path.lower().endswith(".gz") else raw
        while block := src.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")
