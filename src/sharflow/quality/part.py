"""The quality stage's measuring jobs: the one pass over the audio, cached per part.

A record is decoded once before its Shar, here: from that decode a part writes its metrics, its
speaker embedding for the context stage (the part's `.embeddings.npy`, a row per line; merged by
sharflow.quality.merge into what sharflow.context.part reads) and, with identity, its identity part
entry, fingerprint and voice (sharflow.identity.part's files, which the identity index reads).

Each part takes a contiguous run of record lines (the text stage's records) holding an equal share
of the audio seconds (decided from the records file alone, so no plan job is needed); inside a part,
records are bin-packed onto the job's ranks by seconds (sharflow.work.ranks.rank_job): one rank per
visible GPU, each with the job's other threads as CPU workers beside it, else one rank per CPU
worker. A rank (sharflow.quality.rank) writes one line per record, in line order; a record whose
audio cannot be decoded gets an `error` instead of metrics (the filter rejects it). Each line
carries the key of what it measured, and a part keeps the last run's measures of its records where
their keys still match (sharflow.quality.reuse), with their embedding rows and identity entries: a
grown corpus measures its growth. Everything depends only on the record, so any number of parts,
ranks, workers and batch seconds gives the same bytes.
"""

import base64
import json
import logging
import os
import time
from dataclasses import replace
from functools import partial

import numpy as np

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.jsonl import count_lines, merge_by_line
from sharflow.core.layout import IdentityPartFiles
from sharflow.identity.part import (
    HASH_DTYPE,
    Earlier,
    IdentityOptions,
    PartWriter,
    RowsFile,
    VoiceEmbedding,
    identity_key,
    measure_signature,
    part_entries,
    part_lines,
)
from sharflow.models.dnsmos import engine_for
from sharflow.quality.rank import (
    AsrOptions,
    MeasureSettings,
    SpeakerEmbedding,
    audio_path,
    measure_records,
    text_metrics,
)
from sharflow.quality.reuse import kept_measures, measure_digest, record_key, reused_lines
from sharflow.work.parallel import resolve_workers
from sharflow.work.parts import part_records
from sharflow.work.ranks import rank_job

__all__ = ["AsrOptions", "MeasureSettings", "SpeakerEmbedding", "measure_records", "run_quality_part"]

log = logging.getLogger(__name__)


def run_quality_part(
    part: int,
    *,
    records: str,
    parts: int,
    out_metrics: str,
    out_stats: str,
    settings: MeasureSettings,
    device: str = "auto",
    workers: int = 1,
    gpus: int = 0,
    fit_ranks: bool = False,
    previous: str | None = None,
    out_identity: IdentityPartFiles | None = None,
    out_embeddings: str | None = None,
    previous_embeddings: str | None = None,
) -> dict:
    """Measure the records of one part on as many ranks as devices/workers allow, keeping the
    measures in `previous` (the last run's metrics, if any) whose keys still match. From the same
    decode: with settings.identity and `out_identity`, the identity part's files (entries kept by
    key from their last run); with settings.embedder and `out_embeddings`, each record's speaker
    embedding for the context stage (rows in line order, kept from `previous_embeddings`, a row per
    line of `previous`). A record is decoded when any of them is not kept.

    `workers` is the job's threads: CPU ranks without a GPU (with `fit_ranks`, as many as its audio pays
    for: work.ranks.cpu_ranks_for); with GPUs, a rank per GPU, the other threads the ranks' CPU workers."""
    start = time.perf_counter()
    mine = part_records(records, part, parts)
    settings, earlier = _with_identity(settings, out_identity)
    settings, previous, rows = _with_embeddings(settings, out_embeddings, previous, previous_embeddings)
    what, seconds = f"quality part {part}", sum(d for _, _, d in mine) if fit_ranks else None
    with rank_job(
        what, device=device, workers=workers, gpus=gpus, scratch_beside=out_metrics, seconds=seconds
    ) as job:
        digest = measure_digest(settings, engine_for(job.devices[0]))
        keyed, kept, todo = _todo(records, mine, settings, digest, previous, earlier)
        offsets = {line: offset for line, offset, _ in todo}
        cpu_workers = cpu_workers_per_rank(job.devices, workers)
        log.info(
            "quality part %d of %d: %d kept from the last run, %d records on ranks %s, %d CPU worker(s) each",
            *(part, parts, len(mine) - len(todo), len(todo), job.devices, cpu_workers),
        )
        ranks = job.run(
            measure_records,
            {line: duration for line, _, duration in todo},
            unit=lambda line: (line, offsets[line]),
            args=(records, settings, digest, cpu_workers),
        )
        scratch = [r.rank.file("") for r in ranks]
        _write_metrics(out_metrics, f"{job.scratch}/reused.jsonl", scratch, kept, keyed, offsets)
        if settings.embedder is not None:
            write_embeddings(out_embeddings, keyed, offsets, kept, scratch, rows, [r.value for r in ranks])
        if earlier is not None:
            writer = write_identity_part(
                out_identity, settings, records, mine, offsets, earlier, keyed, scratch
            )
            writer.finish(out_identity.stats, part, parts, earlier.reused, time.perf_counter() - start)
    stats = _part_stats(part, parts, len(mine), len(todo), settings, ranks)
    write_json(out_stats, stats)
    return stats


def _part_stats(part: int, parts: int, records: int, measured: int, settings: MeasureSettings, ranks) -> dict:
    """A part's stats from its ranks' (RankResult) own."""
    rank_stats = [{**r.value, "planned_seconds": round(r.planned_cost, 3)} for r in ranks]
    stats = {"part": part, "parts": parts, **_counts(records, measured, rank_stats)}
    return stats | {"asr_model": settings.asr.model if settings.asr else None, "ranks": rank_stats}


def _write_metrics(out: str, reused: str, scratch: list[str], kept, keyed, measured_lines) -> None:
    """The part's metrics in line order: the ranks' lines (their scratch `.jsonl`) of the records
    they measured, merged with the kept measures of the others (written to `reused` first)."""
    with open(reused, "w", encoding="utf-8") as f:
        f.writelines(reused_lines(kept, (k[:3] for k in keyed if k[0] not in measured_lines)))
    with atomic_file(out, "w", encoding="utf-8") as merged:
        merged.writelines(merge_by_line([*(f"{p}.jsonl" for p in scratch), reused]))


def _with_embeddings(settings: MeasureSettings, out: str | None, previous: str | None, previous_rows_at):
    """(settings, previous, the last run's embedding rows or None): without `out`, no embedder; with,
    the last run's metrics are used only when its embedding rows pair with them (else every record
    is measured again)."""
    if settings.embedder is None or out is None:
        return replace(settings, embedder=None), previous, None
    rows = previous_rows(previous, previous_rows_at)
    return settings, (previous if rows is not None else None), rows


def embedding_dtype(dim: int) -> np.dtype:
    """A row of a part's (and the dataset's) speaker embeddings file."""
    return np.dtype([("embedding", "<f4", (dim,))])


def previous_rows(previous: str | None, previous_embeddings: str | None) -> np.ndarray | None:
    """The last run's embedding rows (mapped, not read), one per line of its metrics `previous`;
    None when either is missing or they do not pair (a run killed between the merge's renames)."""
    if not (
        previous and previous_embeddings and os.path.exists(previous) and os.path.exists(previous_embeddings)
    ):
        return None
    rows = np.load(previous_embeddings, mmap_mode="r")
    if rows.dtype.names != ("embedding",) or len(rows) != count_lines(previous):
        return None
    return rows


def write_embeddings(out: str, keyed, measured_lines, kept, scratch: list[str], rows, rank_stats) -> None:
    """The part's embedding rows in line order: the ranks' (their scratch `.embeddings.jsonl`,
    merged by line) for the records they measured, the last run's row of each kept measure's line;
    their width the ranks' (`rank_stats`), else the last run's rows'."""
    dim = next((r["embedding_dim"] for r in rank_stats if r.get("embedding_dim")), None)
    if dim is None:  # nothing measured here: the last run's rows give the width
        dim = rows.dtype["embedding"].shape[0] if rows is not None else 0
    dtype = embedding_dtype(dim)
    measured = merge_by_line([f"{p}.embeddings.jsonl" for p in scratch])
    with RowsFile(out, dtype) as sink:
        for line, key, *_ in keyed:
            if line in measured_lines:
                sink.write(np.frombuffer(base64.b64decode(json.loads(next(measured))["embedding"]), dtype))
            else:
                row = kept[key]["line"] - 1
                sink.write(rows[row : row + 1])


def _counts(records: int, measured: int, rank_stats: list[dict]) -> dict:
    return {
        "records": records,
        "measured": measured,
        "reused": records - measured,
        "unreadable": sum(s["unreadable"] for s in rank_stats),
        "audio_seconds": round(sum(s["audio_seconds"] for s in rank_stats), 3),
        "seconds": max((s["seconds"] for s in rank_stats), default=0.0),
    }


def _todo(records: str, mine, settings: MeasureSettings, digest: str, previous: str | None, earlier=None):
    """(keyed, kept, todo): every record's (line, key, text metrics, identity key), the last run's
    measures still valid by key, and the (line, offset, seconds) of the records to measure: those
    whose metrics, or with identity whose identity entry (in `earlier`), are not kept."""
    keyed = _keyed(records, mine, settings, digest)
    kept = kept_measures(previous, (k[1] for k in keyed))
    todo = [
        item
        for item, (_, key, _, identity) in zip(mine, keyed, strict=True)
        if key not in kept or (earlier is not None and not earlier.has(identity))
    ]
    return keyed, kept, todo


def _with_identity(settings: MeasureSettings, out_identity: IdentityPartFiles | None):
    """(settings, the identity part's last run or None): with identity, its options completed with
    the voices' dimension and the run's measure_signature."""
    options = settings.identity
    if options is None or out_identity is None:
        return replace(settings, identity=None), None
    voices = options.voices
    if voices is not None:
        voices = replace(voices, dim=voices.load().dim)
    options = replace(options, voices=voices, signature=measure_signature(voices))
    out = out_identity
    return replace(settings, identity=options), Earlier(out.records, out.hashes, out.voices, out.stats)


def write_identity_part(
    out: IdentityPartFiles, settings, records: str, mine, measured_lines, earlier, keyed, scratch: list[str]
) -> PartWriter:
    """The identity part's files in line order: the ranks' entries of the records they measured
    (`measured_lines`; their scratch `.identity.jsonl` merged by line), the last run's of the
    others, found by the identity keys _keyed made (`keyed`). Returns the writer, whose `finish`
    writes the part's stats."""
    measured = merge_by_line([f"{p}.identity.jsonl" for p in scratch])
    keys = {line: identity for line, _, _, identity in keyed}
    options = settings.identity
    voices = options.voices
    reuse = partial(part_entries, settings.audio_root, options.dataset, options.own_speaker_ids, voices)
    with PartWriter(out.records, out.hashes, out.voices, voices) as writer:
        for line, raw in part_lines(records, mine):
            if line in measured_lines:
                scratch = json.loads(next(measured))
                hashes = np.frombuffer(base64.b64decode(scratch["hashes"]), HASH_DTYPE)
                voice = scratch["voice"]
                if voice is not None:
                    voice = np.frombuffer(base64.b64decode(voice), voices.dtype)
                writer.add(line, scratch["entry"], hashes, voice)
            else:
                (kept,) = reuse([(line, raw, keys[line], earlier.found(keys[line]))])
                writer.add(line, *kept)
    return writer


def cpu_workers_per_rank(devices: list[str], threads: int) -> int:
    """CPU workers beside each rank: on GPUs the job's threads less one per rank (the rank's own,
    feeding its GPU), shared among the ranks; on CPU ranks (one thread each) one reading thread."""
    if not devices[0].startswith("cuda"):
        return 1
    return max(1, resolve_workers(threads) // len(devices) - 1)


def _keyed(records: str, mine, settings: MeasureSettings, digest: str) -> list[tuple]:
    """(line, key, text metrics, identity key) of a part's records (sharflow.quality.reuse.record_key,
    sharflow.identity.part.identity_key with identity, else None)."""
    out = []
    with open(records, "rb") as src:
        for line, offset, _ in mine:
            src.seek(offset)
            record = json.loads(src.readline())
            path = audio_path(settings.audio_root, record)
            key = record_key(record, path, digest)
            identity = None
            if settings.identity is not None and path:
                identity = identity_key(path, record, settings.identity.signature)
            out.append((line, key, text_metrics(record), identity))  # no whole records held
    return out


def measure_settings(dataset: str, params) -> MeasureSettings:
    """A quality part job's MeasureSettings from its rule's params (rules/quality.smk)."""
    identity = None
    if params.identity:  # with identity: its part's files from the same decode
        voices = params.identity["voices"]
        identity = IdentityOptions(
            dataset, params.identity["own_speaker_ids"], VoiceEmbedding(**voices) if voices else None
        )
    return MeasureSettings(
        params.audio_root,
        params.dnsmos_max_windows,
        AsrOptions(**params.asr) if params.asr else None,
        params.batch_seconds,
        identity,
        SpeakerEmbedding(**params.embedder),
    )
