"""Prepare's readers: one module per corpus form, siblings behind one interface (`Reader`).

A dataset's `format` in the config names its form, and means the same thing everywhere: the key of
FORMS, the reader's `format`, the form prepare's log names.

| format | module | reads |
|---|---|---|
| nemo | readers.nemo | NeMo JSON lines (plain or gzip) or a Parquet manifest |
| lhotse | readers.lhotse | lhotse cuts, or supervisions over recordings |
| webdataset | readers.webdataset | WebDataset tars (`<key>.<audio ext>` + `<key>.json`), Emilia's form |
| parquet_audio | readers.parquet_audio | Parquet with the audio inside, the Hub's form |

No reader imports another: what they share lives once, where every user reaches it —
sharflow.prepare.readers.common (what a reader is opened from, the field mapping, a row as a JSON
line) and sharflow.io.containers (the containers' suffixes, shard-pattern expansion). To add a
form: write its module with a class that has the members of `Reader`, and add a line to FORMS
(tests/test_house.py keeps the readers from importing each other).
"""

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from sharflow.io import containers
from sharflow.prepare.readers.common import Mapping, Source


class Reader(Protocol):
    """A corpus form as prepare reads it."""

    format: str  # the config's datasets.<name>.format
    unit: str  # what a record is called in messages and reject entries: line, row, sample, ...
    first: int  # the number of the first record (line 1, row 0)

    @classmethod
    def open(cls, source: Source) -> "Reader":
        """The reader of a dataset (its manifest, or its containers found from the pattern)."""

    def size(self) -> tuple[int | None, str]:
        """(total, unit) for a progress bar (None: not known ahead)."""

    def chunks(self, progress=None) -> Iterator[list]:
        """Lists of record lines in NeMo form (bytes), or Refused with its reason, in order."""

    def most_records(self) -> int | None:
        """The most records the corpus can give, from what costs almost nothing to read (a line
        count, Parquet footers, tar headers of files that lie here; never a download); None where
        that cannot be told before the corpus is read."""


@dataclass(frozen=True)
class Form:
    """A registry entry: the reader's class ("module:Class", imported on use, so that the Snakefile
    reads suffixes without importing a reader) and the suffix of its container files (None: a
    manifest beside loose audio)."""

    reader: str
    suffix: str | None = None


FORMS: dict[str, Form] = {
    "nemo": Form("nemo:ManifestFile"),
    "lhotse": Form("lhotse:LhotseManifest"),
    "webdataset": Form("webdataset:WebDatasetShards", containers.TAR),
    "parquet_audio": Form("parquet_audio:ParquetAudio", containers.PARQUET),
}


def reader_class(form: str) -> type:
    module, name = FORMS[form].reader.split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def open_reader(form: str, source: Source) -> Reader:
    """The reader of `form` over `source`."""
    return reader_class(form).open(source)


def container_suffix(form: str) -> str | None:
    """The suffix of a form's container files (.tar, .parquet), None for a manifest form."""
    return FORMS[form].suffix


__all__ = ["Form", "Mapping", "Reader", "Source", "container_suffix", "open_reader", "reader_class"]
