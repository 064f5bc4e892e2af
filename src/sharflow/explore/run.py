"""A finished run as the explorer sees it: its datasets, each one's table of cuts and where their audio is.

A dataset's table is its catalog (every cut of its Shar, in every split) and, below it, the records the
quality filter dropped (status: the reject reason; their metrics from quality/metrics.jsonl), so that a
filter on a metric finds both sides of a threshold. Only names the run has are answered: a dataset is
one of the config's whose catalog exists, a cut one of its table's rows; a file is asked of the layout,
never made from a request (sharflow.explore.server).
"""

import json
import logging
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from sharflow.core.layout import RESULTS, DatasetFiles
from sharflow.core.metrics import METRICS
from sharflow.core.shar_fields import open_cuts
from sharflow.core.shar_index import indexed_line
from sharflow.core.splits import TRAIN
from sharflow.dataset.catalog import STRING, catalog_schema
from sharflow.explore.query import add_order
from sharflow.explore.roots import Roots
from sharflow.io import containers
from sharflow.io.audio import resolve_audio_path
from sharflow.shar.format import audio_member_names

log = logging.getLogger(__name__)

KEPT = "kept"
STATUS, DETAIL = "status", "detail"
METRIC_NAMES = frozenset(m.name for m in METRICS)
_SUFFIXES = "|".join(re.escape(s.lstrip(".")) for s in containers.CONTAINER_SUFFIXES)


@dataclass
class Dataset:
    """One dataset of the run: its files (layout), its audio root, where the explorer may read (every
    file it opens is confined to `roots`) and the Shar's audio format."""

    name: str
    files: DatasetFiles
    audio_root: str
    roots: Roots
    audio_format: str = "flac"

    @cached_property
    def table(self) -> pa.Table:
        """The catalog's rows (status `kept`; with quality.action `mark`, a marked cut's verdict is its
        validation_status column) then the quality-dropped records, with the ORDER column; built once,
        on first use."""
        if not os.path.exists(self.files.catalog):  # a long_form dataset not run past its segments yet
            return add_order(
                catalog_schema([], [], False)
                .empty_table()
                .append_column(STATUS, pa.array([], pa.dictionary(pa.int32(), pa.string())))
                .append_column(DETAIL, pa.nulls(0, STRING))
            )
        catalog = pq.read_table(self.roots.confine(self.files.catalog))
        n = catalog.num_rows
        kept = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([KEPT]))
        catalog = catalog.append_column(STATUS, kept).append_column(DETAIL, pa.nulls(n, STRING))
        dropped = dropped_records(self.files, catalog.schema, self.roots.confine)
        if dropped is not None:
            catalog = pa.concat_tables([catalog, dropped])
        return add_order(catalog)

    def row(self, cut: str) -> dict | None:
        """The table's row of cut id `cut`, or None (a scan of one column: ~10 ms a million rows, and
        no index held beside the table)."""
        index = pc.index(self.table["cut_id"], cut).as_py()
        return None if index < 0 else self.table.slice(index, 1).to_pylist()[0]

    def shar_files(self, row: dict) -> DatasetFiles:
        """The files of the Shar set that holds a catalog row (a held-out split's own, or train's)."""
        split = row.get("split")
        if split in (None, TRAIN):
            return self.files
        return DatasetFiles(os.path.join(self.files.root, split), self.files.indexed)

    def shar_member(self, row: dict, kind: str) -> str:
        """The address (tar#member) of a kept cut's `kind` audio ("target" or "context") in its shard,
        named as the shar job names it (shar.audio_format of the run's config)."""
        shard = self.shar_files(row).shard(int(row["shard"]))
        tar = shard.target if kind == "target" else shard.context
        return containers.address(tar, audio_member_names(row["cut_id"], self.audio_format)[0])

    def source(self, audio_filepath: str) -> str:
        """A record's audio at its source (its path resolved under the dataset's audio root: a path
        that leaves it is refused, PathEscapeError)."""
        return resolve_audio_path(self.audio_root, audio_filepath)[0]

    def cut(self, row: dict) -> dict | None:
        """A kept cut's Shar cut (its text, spoken form, tokenizers, context), read from its cuts file."""
        if row.get("shard") is None:
            return None
        files = self.shar_files(row).shard(int(row["shard"]))
        path = self.roots.confine(files.cuts)
        if files.cuts_index is not None:  # an indexed set: the line at its offset
            line = indexed_line(path, row["position"])
            return None if line is None else json.loads(line)
        with open_cuts(path) as f:
            for position, line in enumerate(f):
                if position == row["position"]:
                    return json.loads(line)
        return None


REJECT_SCHEMA = pa.schema(
    [("line", pa.int64()), ("reason", pa.string()), ("detail", pa.string()), ("original", pa.string())]
)
RECORD_SCHEMA = pa.schema(
    [
        ("audio_filepath", pa.string()),
        ("offset", pa.float64()),
        ("duration", pa.float64()),
        ("text", pa.string()),
        ("normalized_text", pa.string()),
        ("speaker", pa.string()),
        ("lang", pa.string()),
        ("source_audio", pa.struct([("sampling_rate", pa.int64())])),
    ]
)


def dropped_records(files: DatasetFiles, schema: pa.Schema, confine) -> pa.Table | None:
    """The records the quality filter dropped, as rows of `schema` (the catalog's): their record's
    fields, their metrics and their reason (STATUS) and its detail; None when it dropped none. Each
    file is opened as `confine` returns its path (Roots.confine). The files are read by pyarrow's JSON
    reader (C++, every core): a million metrics lines take ~1 s."""
    folder = Path(files.quality_rejected)
    paths = sorted(confine(str(p)) for p in folder.glob("*.jsonl")) if folder.is_dir() else []
    tables = [_read_json(p, REJECT_SCHEMA) for p in paths]
    rejects = pa.concat_tables(tables) if tables else None
    if rejects is None or rejects.num_rows == 0:
        return None
    rejects = rejects.sort_by("line")
    wanted = [f for f in schema if f.name in METRIC_NAMES]
    metrics = _read_json(
        confine(files.quality_metrics),
        pa.schema([("line", pa.int64()), *((f.name, pa.float64()) for f in wanted)]),
    )
    metrics = metrics.take(pc.index_in(rejects["line"], value_set=metrics["line"]))
    records = _read_json(pa.py_buffer("\n".join(rejects["original"].to_pylist()).encode()), RECORD_SCHEMA)
    text = pc.coalesce(records["text"], "")
    columns = {
        **{f.name: metrics[f.name] for f in wanted},
        "cut_id": cut_ids(records["audio_filepath"], records["offset"], records["duration"]),
        "speaker": records["speaker"],
        "language": records["lang"],
        "source_file": records["audio_filepath"],
        "offset": pc.coalesce(records["offset"], 0.0),
        "duration": records["duration"],
        "source_sample_rate": pc.struct_field(records["source_audio"], "sampling_rate"),
        "text_chars": pc.utf8_length(text),
        "normalized_text_chars": pc.utf8_length(pc.coalesce(records["normalized_text"], text)),
        STATUS: rejects["reason"],
        DETAIL: rejects["detail"],
    }
    n = rejects.num_rows
    return pa.table(
        [columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type) for f in schema],
        schema=schema,
    )


def _read_json(source, schema: pa.Schema) -> pa.Table:
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    if isinstance(source, str):
        return pj.read_json(source, parse_options=options)
    return pj.read_json(pa.BufferReader(source), parse_options=options)


def cut_ids(paths: pa.ChunkedArray, offsets: pa.ChunkedArray, durations: pa.ChunkedArray) -> pa.Array:
    """sharflow.shar.plan.cut_id of many records at once (a tar or Parquet member named by its member's
    path, the extension of the file name dropped, / as -, offset and duration in units of 10 µs)."""
    member = pc.replace_substring_regex(paths, rf"^.*\.(?:{_SUFFIXES})#([^#]+)$", r"\1")
    recording = pc.replace_substring(pc.replace_substring_regex(member, r"\.[^./]*$", ""), "/", "-")

    def units(seconds):
        rounded = pc.round(pc.multiply(pc.coalesce(seconds, 0.0), 1e5), round_mode="half_to_even")
        return rounded.cast(pa.int64()).cast(pa.string())

    return pc.binary_join_element_wise(recording, units(offsets), units(durations), "-")


class Run:
    """The run under `root` (the folder holding results/), with its config (the datasets' audio roots)."""

    def __init__(self, root: str | os.PathLike, config: dict):
        self.root = Path(root).resolve()
        self.config = config
        self.datasets: dict[str, Dataset] = {}
        specs = config.get("datasets") or {}
        # every configured dataset's audio root (one without a catalog too: a link can name its records)
        self.audio_roots = {
            name: _root(self.root, spec.get("audio_root", "")) for name, spec in specs.items()
        }
        # the run's folder, its results wherever a symlink puts them, and every audio root
        self.roots = Roots([str(self.root), str(self.root / RESULTS), *self.audio_roots.values()])
        audio_format = (config.get("shar") or {}).get("audio_format", "flac")
        for name in sorted(specs):
            files = DatasetFiles(str(self.root / RESULTS / name))
            if os.path.exists(files.shard_plan):
                files = files.as_planned()
            if not os.path.exists(files.catalog) and not os.path.exists(files.segment_plan):
                log.warning("dataset %s has no catalog (%s): not shown", name, files.catalog)
                continue  # a long_form dataset is shown once its recordings are planned (Recordings)
            self.datasets[name] = Dataset(name, files, self.audio_roots[name], self.roots, audio_format)

    def dataset(self, name: str) -> Dataset | None:
        return self.datasets.get(name)


def _root(run: Path, audio_root: str) -> str:
    """An audio root as the workflow resolves it: a URL as it is, a path from the run's folder."""
    return audio_root if "://" in audio_root else os.path.join(str(run), audio_root)
