"""The dataset catalog: one typed Parquet row per cut of the final Shar, in shard order.

Each shar shard job writes its shard's fragment (`catalog_fragment`, rows built as the cuts are
written); the `catalog` job merges the fragments one at a time into results/<dataset>/catalog.parquet
(`merge_catalog`), adding what only exists once the shard is done: codes frames per codec and, with
`training.tokenizer` set, the number of text tokens the model sees. Nothing holds more than one
shard's rows plus one row group being written.

Column types: times (offset, duration, context offset and duration) are float64, so that sums and
bucket bins equal those computed from the cuts; lengths, counts and rates are int32; scores are
float32; repeated strings (speaker, language, files, validation_status) are dictionary-encoded.
Quality metrics appear only when some record of the dataset has them.
"""

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from sharflow.core.atomic import atomic_path
from sharflow.core.metrics import CATALOG_METRICS, METRICS
from sharflow.core.splits import TRAIN

log = logging.getLogger(__name__)

STRING = pa.dictionary(pa.int32(), pa.string())
BASE_COLUMNS = (
    ("cut_id", pa.string()),
    ("shard", pa.int32()),
    ("position", pa.int32()),
    ("speaker", STRING),
    ("language", STRING),
    ("source_file", STRING),
    ("offset", pa.float64()),
    ("duration", pa.float64()),
    ("source_sample_rate", pa.int32()),
    ("sample_rate", pa.int32()),
    ("num_samples", pa.int32()),
    ("text_chars", pa.int32()),
    ("normalized_text_chars", pa.int32()),
    ("context_file", STRING),
    ("context_offset", pa.float64()),
    ("context_duration", pa.float64()),
    ("context_sample_rate", pa.int32()),
    ("context_num_samples", pa.int32()),
    ("context_similarity", pa.float32()),
)
FRAGMENT_SCHEMA = pa.schema(
    [
        *BASE_COLUMNS,
        *((m, pa.float32()) for m in CATALOG_METRICS),
        ("validation_status", STRING),
        ("asr_text", pa.string()),
        ("tokenizer_names", STRING),
        ("normalized_text_source", STRING),
        ("fingerprint_hashes", pa.int32()),
        ("audio_digest", pa.string()),
        ("duplicate_of", pa.string()),
        ("context_embedder", STRING),
    ]
)
TEXT_COLUMNS = ("tokenizer_names", "normalized_text_source")  # the text stage's (sharflow.text)
IDENTITY_COLUMNS = ("fingerprint_hashes", "audio_digest", "duplicate_of")  # the identity stage's
# dropped when null in every row
OPTIONAL_COLUMNS = (  # context_embedder: records made before their similarity said its scale
    *CATALOG_METRICS,
    "validation_status",
    "asr_text",
    *TEXT_COLUMNS,
    *IDENTITY_COLUMNS,
    "context_embedder",
)
ROW_GROUP_ROWS = 65536
# What each column holds (the docs' catalog table is generated from this; <codec>: each codec's name).
COLUMN_DOCS: dict[str, str] = {
    "cut_id": "the cut's id, as in the Shar (recording id, offset and duration in units of 10 µs)",
    "shard": "the shard that holds the cut",
    "position": "the cut's position in its shard, from 0",
    "split": "train, dev_seen, dev_unseen, test_seen or test_unseen (shard and position are in that "
    "split's Shar)",
    "speaker": "the standardized speaker, in NeMo's form (Language, Dataset and Speaker between bars)",
    "language": "the cut's `lang` (the language MagpieTTS reads the cut in), also the supervision's",
    "source_file": "the source audio, relative to the dataset's audio root",
    "offset": "where the utterance starts in the source file (s)",
    "duration": "the utterance's duration (s)",
    "source_sample_rate": "the source file's sample rate (Hz)",
    "sample_rate": "the target audio's sample rate in the Shar (Hz)",
    "num_samples": "the target audio's samples in the Shar",
    "text_chars": "characters of `text`",
    "normalized_text_chars": "characters of `normalized_text` (null without one)",
    "context_file": "the context audio's source file",
    "context_offset": "where the context starts in its file (s)",
    "context_duration": "the context's duration (s)",
    "context_sample_rate": "the context audio's sample rate in the Shar (Hz)",
    "context_num_samples": "the context audio's samples in the Shar",
    "context_similarity": "cosine similarity of the target's and the context's speaker embeddings",
    "context_embedder": "what measured context_similarity (its scale): ge2e, or nemo:<model> "
    "(nemo:titanet_large is the scale of NeMo's documented min_context_speaker_similarity 0.6)",
    **{m.name: f"{m.what} (when measured, or carried by the manifest)" for m in METRICS},
    "validation_status": "`pass` or `fail` (quality.action: mark; NeMo's dataloader filters on it)",
    "asr_text": "the ASR check's transcript",
    "tokenizer_names": "the cut's `tokenizer_names` (MagpieTTS picks one per step), comma-separated",
    "normalized_text_source": "where `normalized_text` came from: manifest, normalizer (NeMo's text "
    "normalizer) or text (read as it is)",
    "fingerprint_hashes": "landmark hashes of the cut's content fingerprint (identity stage, with "
    "splits; 0: too short or silent to fingerprint, never matched by content)",
    "audio_digest": "digest of the cut's decoded source samples (identity stage; equal for exact copies)",
    "duplicate_of": "the first train copy of the same samples (`<dataset>:<file>@<offset>`; "
    "identity.train_duplicates: mark)",
    "tokens": "text tokens as MagpieTTS counts them (with training.tokenizer)",
    "frames_<codec>": "code frames of the target audio for that codec",
    "context_frames_<codec>": "code frames of the context audio for that codec",
}


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _text(value) -> str | None:
    return value if isinstance(value, str) else None


def catalog_row(
    record: dict,
    *,
    cut_id: str,
    shard: int,
    position: int,
    language: str,
    target: tuple[int, int],
    context: tuple[int, int],
) -> dict:
    """The catalog row of one written cut. `target`, `context`: (sampling_rate, num_samples) in the Shar."""
    normalized = record.get("normalized_text")
    row = {
        "cut_id": cut_id,
        "shard": shard,
        "position": position,
        "speaker": record["speaker"],
        "language": language,
        "source_file": record["audio_filepath"],
        "offset": record["offset"],
        "duration": record["duration"],
        "source_sample_rate": record["source_audio"]["sampling_rate"],
        "sample_rate": target[0],
        "num_samples": target[1],
        "text_chars": len(record["text"]),
        "normalized_text_chars": len(normalized) if isinstance(normalized, str) else None,
        "context_file": record["context_audio_filepath"],
        "context_offset": record["context_audio_offset"],
        "context_duration": record["context_audio_duration"],
        "context_sample_rate": context[0],
        "context_num_samples": context[1],
        "context_similarity": _number(record.get("context_speaker_similarity")),
    }
    for metric in CATALOG_METRICS:
        row[metric] = _number(record.get(metric))
    status = record.get("validation_status")
    row["validation_status"] = status if isinstance(status, str) else None
    asr_text = record.get("asr_text")
    row["asr_text"] = asr_text if isinstance(asr_text, str) else None
    names = record.get("tokenizer_names")
    row["tokenizer_names"] = ",".join(names) if isinstance(names, list) else None
    source = record.get("normalized_text_source")
    row["normalized_text_source"] = source if isinstance(source, str) else None
    hashes = record.get("fingerprint_hashes")
    row["fingerprint_hashes"] = hashes if isinstance(hashes, int) and not isinstance(hashes, bool) else None
    for name in ("audio_digest", "duplicate_of"):
        row[name] = record[name] if isinstance(record.get(name), str) else None
    row["context_embedder"] = _text(record.get("context_speaker_embedder"))
    return row


def write_fragment(rows: list[dict], path: str) -> None:
    """One shard's rows as a Parquet file with FRAGMENT_SCHEMA (written under a temp name)."""
    table = pa.Table.from_pylist(rows, schema=FRAGMENT_SCHEMA)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


# ---- merge --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CodecFrames:
    """What turns an audio length into a codec's frame count: its rate and samples per frame."""

    name: str
    sample_rate: int
    samples_per_frame: int


def _columns_with_values(path: str, columns: tuple[str, ...]) -> set[str]:
    """Which of `columns` hold a value in some row of a fragment (from its footer's statistics)."""
    meta = pq.read_metadata(path)
    schema = meta.schema.to_arrow_schema()
    found = set()
    for column in columns:
        index = schema.get_field_index(column)
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(index)
            stats = chunk.statistics
            if stats is None or not stats.has_null_count:  # no statistics: read the column
                if (
                    pq.read_table(path, columns=[column], use_threads=False).column(0).null_count
                    < meta.num_rows
                ):
                    found.add(column)
                break
            if stats.null_count < chunk.num_values:
                found.add(column)
                break
    return found


def kept_optional_columns(fragments: list[str]) -> list[str]:
    """The quality metrics and validation_status that some row of some fragment has."""
    found: set[str] = set()
    for path in fragments:
        found |= _columns_with_values(path, tuple(c for c in OPTIONAL_COLUMNS if c not in found))
    return [c for c in OPTIONAL_COLUMNS if c in found]


def catalog_schema(
    optional: list[str], codecs: list[CodecFrames], tokens: bool, split: bool = False
) -> pa.Schema:
    fields = [pa.field(name, kind) for name, kind in BASE_COLUMNS]
    if split:  # after cut_id, shard, position: where a cut is
        fields.insert(3, pa.field("split", STRING))
    fields += [FRAGMENT_SCHEMA.field(c) for c in optional]
    if tokens:
        fields.append(pa.field("tokens", pa.int32()))
    for codec in codecs:
        fields += [pa.field(f"frames_{codec.name}", pa.int32())]
        fields += [pa.field(f"context_frames_{codec.name}", pa.int32())]
    return pa.schema(fields)


def frames_column(num_samples: np.ndarray, sample_rate: np.ndarray, codec: CodecFrames) -> np.ndarray:
    """Codes frames of each audio: sharflow.codes.shard.code_frames, row by row."""
    from sharflow.codes.batches import code_frames

    return np.asarray(
        [
            code_frames(n, r, codec.sample_rate, codec.samples_per_frame)
            for n, r in zip(num_samples.tolist(), sample_rate.tolist(), strict=True)
        ],
        dtype=np.int32,
    )


def merge_catalog(
    fragments: list[str],
    out: str,
    *,
    codecs: list[CodecFrames],
    token_counts: Callable[[int], list[int]] | None = None,
    splits: list[str] | None = None,
) -> dict:
    """Merge the shard fragments, in shard order, into `out`; returns {rows, columns}.

    `token_counts(i) -> list[int]`, when given, counts the tokens of fragment i's cuts (in order).
    `splits` (with splits configured): each fragment's split, written in a `split` column. Rows are
    written in row groups of about ROW_GROUP_ROWS; at most one shard's rows and one row group are
    held.
    """
    optional = kept_optional_columns(fragments)
    schema = catalog_schema(optional, codecs, token_counts is not None, splits is not None)
    rows = pending_rows = 0
    pending: list[pa.Table] = []
    columns = [name for name, _ in BASE_COLUMNS] + optional
    with atomic_path(out) as tmp, pq.ParquetWriter(tmp, schema) as writer:
        for shard, path in enumerate(tqdm(fragments, desc="catalog", unit="shard", mininterval=5)):
            table = pq.read_table(path, columns=columns, use_threads=False)  # (see iter_batches)
            if splits is not None:
                table = table.add_column(3, "split", pa.array([splits[shard]] * table.num_rows, pa.string()))
            if token_counts is not None:
                counts = token_counts(shard)
                if len(counts) != table.num_rows:
                    raise ValueError(f"shard {shard}: {len(counts)} token counts for {table.num_rows} rows")
                table = table.append_column("tokens", pa.array(counts, pa.int32()))
            for codec in codecs:
                for prefix in ("", "context_"):
                    frames = frames_column(
                        table.column(f"{prefix}num_samples").to_numpy(),
                        table.column(f"{prefix}sample_rate").to_numpy(),
                        codec,
                    )
                    table = table.append_column(f"{prefix}frames_{codec.name}", pa.array(frames))
            pending.append(table.cast(schema))
            rows += table.num_rows
            pending_rows += table.num_rows
            if pending_rows >= ROW_GROUP_ROWS:
                _write_group(writer, pending)
                pending_rows = 0
        _write_group(writer, pending)
    log.info("catalog %s: %d rows, %d columns (%s)", out, rows, len(schema), ", ".join(schema.names))
    return {"rows": rows, "columns": schema.names}


def _write_group(writer: pq.ParquetWriter, pending: list[pa.Table]) -> None:
    if pending:
        # one row group; dictionaries of the pieces are unified
        writer.write_table(pa.concat_tables(pending).unify_dictionaries().combine_chunks())
        pending.clear()


def build_catalog(
    dataset: str,
    *,
    fragments: list[str],
    plan: str,
    codes_stats: dict[str, str],
    out: str,
    tokenizer: dict | None = None,
    held_out: list[tuple[str, str]] | None = None,
) -> dict:
    """results/<dataset>/catalog.parquet from the shard jobs' fragments and the codes stats.

    `codes_stats`: {codec: codes stats file} (each gives the codec's rate and samples per frame);
    `tokenizer`: training.tokenizer, to add a `tokens` column counted from the shards' cuts files;
    `held_out` (with splits configured): (split, shard plan) of each held-out split's Shar set,
    whose rows follow the dataset's own (train) rows, with a `split` column.
    """
    from sharflow.core.atomic import read_json
    from sharflow.core.layout import DatasetFiles, cut_files, shar_dir_of_plan

    codecs = []
    for name, path in sorted(codes_stats.items()):
        stats = read_json(path)
        codecs.append(CodecFrames(name, int(stats["sample_rate"]), int(stats["samples_per_frame"])))
    token_counts = None
    if tokenizer:
        from sharflow.dataset.tokens import TokenCounter

        counter = TokenCounter(tokenizer)
        cuts = cut_files(shar_dir_of_plan(plan), plan)
        cuts += [c for _, p in held_out or () for c in cut_files(shar_dir_of_plan(p), p)]

        def token_counts(i: int) -> list[int]:
            return counter.count_cuts(cuts[i])

    splits = None
    if held_out is not None:
        sets = [(split, DatasetFiles(str(Path(p).parent)).planned()) for split, p in held_out]
        splits = ["train"] * len(fragments) + [split for split, shards in sets for _ in shards]
        fragments = list(fragments) + [shard.catalog for _, shards in sets for shard in shards]
    summary = merge_catalog(fragments, out, codecs=codecs, token_counts=token_counts, splits=splits)
    log.info("catalog %s: %d cuts", dataset, summary["rows"])
    return summary


# ---- reading ------------------------------------------------------------------------------------


def iter_batches(
    path: str, columns: list[str], batch_rows: int = ROW_GROUP_ROWS, split: str | None = TRAIN
) -> Iterator[pa.RecordBatch]:
    """The catalog's `columns` of the rows of `split`, one batch at a time (bounded memory). The
    default is train, what training, buckets and the card's figures are about (a catalog without a
    `split` column is all train); None gives every row. One thread: arrow's thread pool costs ~0.4 s
    to start and more memory than these narrow reads save."""
    has_split = "split" in column_names(path)
    if split is not None and not has_split and split != TRAIN:
        return
    by_split = split is not None and has_split
    read = [*columns, "split"] if by_split and "split" not in columns else columns
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=read, use_threads=False):
        if by_split:
            batch = batch.filter(pa.array(_is(batch.column("split"), split))).select(columns)
        yield batch


def _is(column: pa.Array, value: str) -> np.ndarray:
    """column == value, row by row, as booleans (a dictionary column by its indices: no decoding)."""
    if pa.types.is_dictionary(column.type):
        codes = [i for i, v in enumerate(column.dictionary.to_pylist()) if v == value]
        return np.isin(column.indices.to_numpy(zero_copy_only=False), codes)
    return np.asarray(column.to_pylist(), dtype=object) == value


def read_columns(path: str, columns: list[str], split: str | None = TRAIN) -> dict[str, np.ndarray]:
    """Whole numeric columns of the rows of `split` (as iter_batches) as numpy arrays (4-8 bytes per
    cut each)."""
    batches = list(iter_batches(path, columns, split=split))
    if not batches:
        schema = pq.read_schema(path)
        return {c: np.zeros(0, dtype=schema.field(c).type.to_pandas_dtype()) for c in columns}
    table = pa.Table.from_batches(batches)
    return {c: table.column(c).to_numpy() for c in columns}


def column_names(path: str) -> list[str]:
    return pq.read_schema(path).names
