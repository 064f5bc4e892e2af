"""NeMo manifests in (format nemo): JSON lines (plain or gzip) and Parquet, streamed as raw JSON lines.

Every encoding becomes the same thing, chunks of raw JSON object lines, so that one set of checks
(sharflow.prepare.manifest.check_line) gives the same prepared records and reject reasons whatever the
file's encoding. A Parquet manifest is read one batch of rows at a time (never the whole table): each
row becomes the JSON object of its non-null columns, so a null reads as an absent field, as it
would in a JSON-lines manifest. Positions are 1-based line numbers for JSON lines and 0-based row
numbers for Parquet (as `pandas.read_parquet(path).iloc[row]` finds the row).
"""

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sharflow.core.errors import SharflowError
from sharflow.io import storage
from sharflow.prepare.readers.common import Source, count_lines, row_line

CHUNK_LINES = 2048
PARQUET_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class ManifestFile:
    """One NeMo manifest: its encoding (by suffix), how its records are numbered, and its chunks."""

    path: str

    format = "nemo"

    @classmethod
    def open(cls, source: Source) -> "ManifestFile":
        """The manifest; an object fetched into the object cache first."""
        return cls(storage.local_file(source.manifest) if source.fetch else source.manifest)

    @property
    def encoding(self) -> str:
        """How the records are written: jsonl, jsonl.gz or parquet."""
        name = self.path.lower()
        if name.endswith(PARQUET_SUFFIXES):
            return "parquet"
        return "jsonl.gz" if name.endswith(".gz") else "jsonl"

    @property
    def unit(self) -> str:
        """What a record is called in messages and reject entries: "line" or "row"."""
        return "row" if self.encoding == "parquet" else "line"

    @property
    def first(self) -> int:
        """The number of the first record: line 1, row 0."""
        return 0 if self.encoding == "parquet" else 1

    def most_records(self) -> int | None:
        """The lines of a JSON-lines manifest, the rows in a Parquet one's footer; None for an object
        (it is not fetched to count)."""
        if storage.is_url(self.path):
            return None
        return self._parquet().metadata.num_rows if self.encoding == "parquet" else count_lines(self.path)

    def size(self) -> tuple[int, str]:
        """(total, unit) for a progress bar: rows of a Parquet file, else bytes of the file."""
        if self.encoding == "parquet":
            return self._parquet().metadata.num_rows, "row"
        return Path(self.path).stat().st_size, "B"

    def chunks(self, progress=None) -> Iterator[list[bytes]]:
        """Lists of at most CHUNK_LINES raw JSON lines (no line ends), in file order."""
        if self.encoding == "parquet":
            yield from self._parquet_chunks(progress)
        else:
            yield from self._line_chunks(progress)

    def _line_chunks(self, progress) -> Iterator[list[bytes]]:
        with open(self.path, "rb") as raw:
            src = gzip.GzipFile(fileobj=raw, mode="rb") if self.encoding == "jsonl.gz" else raw
            chunk: list[bytes] = []
            done = 0
            try:
                for line in src:
                    chunk.append(line.rstrip(b"\r\n"))
                    if len(chunk) == CHUNK_LINES:
                        done = _advance(progress, raw.tell(), done)
                        yield chunk
                        chunk = []
            except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
                raise SharflowError(
                    f"manifest {self.path}: not readable as gzip JSON lines ({e}); "
                    "give the file uncompressed, or recompress it"
                ) from None
            _advance(progress, raw.tell(), done)
            if chunk:
                yield chunk

    def _parquet(self):
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(self.path)
        except Exception as e:
            raise SharflowError(
                f"manifest {self.path}: not a readable Parquet file ({type(e).__name__}: {e}); "
                "name JSON-lines manifests .json, .jsonl or .jsonl.gz"
            ) from None

    def _parquet_chunks(self, progress) -> Iterator[list[bytes]]:
        for batch in self._parquet().iter_batches(batch_size=CHUNK_LINES):
            rows = batch.to_pylist()
            if progress is not None:
                progress.update(len(rows))
            yield [row_line(row) for row in rows]


def _advance(progress, position: int, done: int) -> int:
    if progress is not None and position > done:
        progress.update(position - done)
    return max(position, done)
