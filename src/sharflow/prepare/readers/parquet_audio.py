"""Parquet with the audio inside, as the Hugging Face Hub ships LibriTTS-R, MLS and many corpora: a
column of Audio structs (`bytes`, `path`) beside the text, speaker and other columns, read in place.

Each row becomes one record in the form of a NeMo manifest line, so that prepare's one set of checks
(sharflow.prepare.manifest.check_line) gives it the same prepared records and reject reasons: its
`audio_filepath` addresses the row's audio inside its file (`train-00000-of-00010.parquet#123`,
sharflow.io.containers: every stage reads it there, nothing is extracted), and its fields come from
the columns through the dataset's field mapping (`fields`: audio, text, speaker, duration, language
by their column names; the other columns ride along, or only those `extra_fields` lists). A file
without the mapped columns stops the job with the columns it has.

Files are read one batch of rows at a time (never the whole table): without a duration column, the
audio column too (in batches of AUDIO_BATCH rows) and each row's duration is its audio's length from
the header. Rows are numbered from 0 over the files in order; a reject names the file and its row.
"""

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from sharflow.core.errors import SharflowError
from sharflow.io import containers, storage
from sharflow.io.audio import probe_bytes
from sharflow.prepare.manifest import Probed, Refused
from sharflow.prepare.readers.common import MAPPED, Mapping, Source, container_files, row_line

CHUNK_RECORDS = 2048
AUDIO_BATCH = 128  # rows whose audio is held at once when durations come from the audio


@dataclass(frozen=True)
class ParquetAudio:
    """A dataset's Parquet files with embedded audio as prepare reads them. `required` are the record
    fields whose columns must be there (text, speaker: unless the dataset does without)."""

    files: tuple
    mapping: Mapping = field(default_factory=Mapping)
    required: tuple = ("text", "speaker")

    format = "parquet_audio"
    unit = "row"
    first = 0

    @classmethod
    def open(cls, source: Source) -> "ParquetAudio":
        return cls(
            container_files(source, containers.PARQUET, "Parquet file"), source.mapping, source.required
        )

    def most_records(self) -> int | None:
        """The rows of the files, from their footers; None where a file is an object (it is not
        fetched to count) or not there."""
        import pyarrow.parquet as pq

        if any(storage.is_url(f) or not os.path.isfile(f) for f in self.files):
            return None
        return sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)

    def size(self) -> tuple[int, str]:
        """(total, unit) for a progress bar: the rows of the files."""
        return sum(self._file(f).metadata.num_rows for f in self.files), "row"

    def chunks(self, progress=None) -> Iterator[list[bytes | Probed | Refused]]:
        """Lists of at most CHUNK_RECORDS items, in order: a record line in NeMo form (Probed, with its
        audio's header, where the reader read the audio for its duration), or Refused."""
        chunk: list[bytes | Refused] = []
        for path in self.files:
            for item in self._rows(path):
                chunk.append(item)
                if len(chunk) == CHUNK_RECORDS:
                    if progress is not None:
                        progress.update(len(chunk))
                    yield chunk
                    chunk = []
        if progress is not None:
            progress.update(len(chunk))
        if chunk:
            yield chunk

    def _file(self, path: str):
        import pyarrow.parquet as pq

        if not storage.exists(path):
            raise SharflowError(f"Parquet file {path} is not there; fix datasets.<name>.manifest")
        try:  # an object: its footer and the column chunks read, each by range (never copied)
            return pq.ParquetFile(
                storage.RangeFile(path, storage.head(path)) if storage.is_url(path) else path
            )
        except Exception as e:
            raise SharflowError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from None

    def _columns(self, path: str, names: list[str]) -> tuple[str, str | None]:
        """(audio column, duration column or None) of a file, or the error naming what it lacks."""
        mapped = {**MAPPED, "audio": "audio", **self.mapping.fields}
        needed = ["audio", *self.required]
        missing = [f"{ours} ({mapped[ours]!r})" for ours in needed if mapped[ours] not in names]
        if missing:
            raise SharflowError(
                f"{path}: no column for {', '.join(missing)}; its columns are {', '.join(names)}. "
                "Name them in datasets.<name>.fields (e.g. text: text_normalized, speaker: speaker_id)"
            )
        return mapped["audio"], mapped["duration"] if mapped["duration"] in names else None

    def _rows(self, path: str) -> Iterator[bytes | Probed | Refused]:
        source = self._file(path)
        names = list(source.schema_arrow.names)
        audio, duration = self._columns(path, names)
        others = [n for n in names if n != audio]
        row = 0
        if duration is not None:
            for batch in source.iter_batches(batch_size=CHUNK_RECORDS, columns=others):
                for values in batch.to_pylist():
                    yield self._record(path, row, audio, values, read_audio=False)
                    row += 1
            return
        for batch in source.iter_batches(batch_size=AUDIO_BATCH, columns=[*others, audio]):
            for values in batch.to_pylist():
                cell = values.pop(audio)
                yield self._record(path, row, audio, values, cell)
                row += 1

    def _record(
        self, path: str, row: int, audio: str, values: dict, cell=None, read_audio=True
    ) -> bytes | Probed | Refused:
        original = row_line(values)
        record = {
            "audio_filepath": containers.address(path, containers.parquet_member(row, audio)),
            **self.mapping.record({k: v for k, v in values.items() if v is not None}),
        }
        if read_audio:  # no duration column: the audio's own length
            data = cell.get("bytes") if isinstance(cell, dict) else cell
            if not isinstance(data, bytes) or not data:
                return Refused(
                    "missing_audio", f"{path}, row {row}: column {audio!r} holds no audio", original
                )
            try:
                info = probe_bytes(data)
            except Exception as e:
                detail = f"{path}, row {row}: column {audio!r} does not decode ({e})"
                return Refused("unreadable_audio", detail, original)
            record["duration"] = info.num_samples / info.sampling_rate
            # the header read here is the one prepare's checks would read again: handed over with the line
            return Probed(json.dumps(record, ensure_ascii=False, default=str).encode("utf-8"), info)
        return json.dumps(record, ensure_ascii=False, default=str).encode("utf-8")
