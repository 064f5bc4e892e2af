"""The shar stage's shard job: NeMo-compatible Lhotse Shar shards, one atomic job per shard.

For one shard index of the plan (sharflow.shar.plan): decode the target and context spans and
encode them in worker processes (results in order), build every part of a cut before writing it
to any writer, and write cuts / target_audio / context_audio (and the shard's catalog fragment,
sharflow.dataset.catalog) under temporary names outside the Shar field folders, renamed into place only
when the shard is complete. A cut that fails goes to the shard's reject list and into no field, so
the fields stay aligned. sharflow.shar.merge sums the shards' stats.

Cuts follow lhotse's Shar conventions and NeMo's MagpieTTS reader: one MonoCut per utterance
(start = offset in the source recording, channel 0), one supervision with text, language, the
standardized speaker and every other manifest field in `custom`; target and context audio tars
keyed by the cut id, the context with its own Recording (own duration and sample count). They are
written by sharflow.shar.format in the bytes lhotse's own writers give, without importing lhotse
(and torch): the job starts in a fraction of a second.
"""

import gzip
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import BinaryIO, NamedTuple

import pyarrow.parquet as pq
from tqdm import tqdm

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.blocks import block_members, block_size, shard_key
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles, ShardFiles
from sharflow.core.ledger import Ledger, reject_row
from sharflow.core.shar_index import write_index
from sharflow.dataset.catalog import catalog_row, write_fragment
from sharflow.io import containers
from sharflow.io.audio import resolve_audio_path
from sharflow.shar.audio import EncodedAudio, EncodeSettings, encode_record
from sharflow.shar.format import (
    TarMemberWriter,
    audio_member_names,
    cut_dict,
    cut_line,
    placeholder_bytes,
    write_member,
)
from sharflow.shar.plan import cut_id, job_input_keys, job_input_shards, segment_id
from sharflow.work.jobs import finish_job, planned_jobs
from sharflow.work.parallel import ordered_map
from sharflow.work.resume import ResumableJob, content_key

log = logging.getLogger(__name__)

REASONS: dict[str, str] = {
    "unreadable_audio": "the target span could not be decoded or encoded",
    "unreadable_context_audio": "the context span could not be decoded or encoded",
}
TASK_RECORDS = 8  # records per worker task


# ---- shard --------------------------------------------------------------------------------------


def write_shard(
    shard: int,
    *,
    records: list[dict],
    out: ShardFiles,
    settings: EncodeSettings,
    workers: int = 1,
    audio_key: str | None = None,
) -> dict:
    """Write one shard's cuts, target_audio and context_audio files from its `records` (in shard
    order: its job's inputs, sharflow.shar.plan), atomically and aligned. Returns the stats written
    to `out.stats` (with `audio_key`, what its audio is made of: shard_keys).
    """
    start = time.perf_counter()
    tmp = _fresh_work_dir(Path(out.stats).parent, shard)
    try:
        written = _write_fields(records, tmp, shard, settings, workers)
        written.ledger.check(len(records), fix="this is a bug in sharflow's shard job")
        cuts = _finish_cuts(tmp, indexed=out.cuts_index is not None, tars=("target.tar", "context.tar"))
        write_fragment(written.rows, str(tmp / "catalog.parquet"))
        summary = _shard_summary(shard, written, tmp, cuts, time.perf_counter() - start)
        if audio_key is not None:
            summary["audio_key"] = audio_key
        _publish(tmp, out, summary, written.rejected)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _log_shard(summary)
    return summary


def write_shards(
    members: list[str],
    outputs,
    *,
    inputs: str,
    settings: EncodeSettings,
    workers: int = 1,
    resume: ResumableJob | None = None,
) -> list[dict]:
    """write_shard for each shard of a job over a block (member keys), its records from the job's
    `inputs` file and its files from the job's named outputs (cuts_<m>, target_<m>, ... catalog_<m>:
    a Snakemake job's, or a mapping), in order. With `resume` (sharflow.work.resume), a shard made
    before from the same records and settings is put back instead (its stats read back), and one made
    from records whose audio spans and contexts are the same (a corrected text) keeps its audio files
    and has the rest written again (rewrite_metadata)."""
    held = job_input_keys(inputs)
    if held != list(members):
        raise SharflowError(f"{inputs} holds shards {held}, the job makes {members}: rerun shar_plan")
    stats = []
    for m, (shard, lines) in enumerate(job_input_shards(inputs)):  # one shard's records at a time
        out = ShardFiles.of_member(outputs, m)
        named = out.named()
        files = list(named.values())
        records = [json.loads(raw) for raw in lines]
        key, audio = shard_keys(lines, records, settings, indexed=out.cuts_index is not None)
        if resume is not None and resume.restore(shard, files, key):
            stats.append(read_json(out.stats))
            continue
        summary = None
        audio_files = [i for i, name in enumerate(named) if name in AUDIO_FILES]
        if resume is not None and resume.restore_part(shard, files, audio_files, "audio", audio):
            summary = rewrite_metadata(int(shard), records, out, _kept_files(resume, shard, files))
            if summary is None:  # the kept shard does not hold these cuts: written whole below
                resume.partly.remove(shard)
        if summary is None:
            summary = write_shard(
                int(shard), records=records, out=out, settings=settings, workers=workers, audio_key=audio
            )
        stats.append(summary)
        if resume is not None:
            resume.keep(shard, files, key, audio=audio)
    return stats


# A shard's audio: the spans its records cut from their files and their contexts' (with the settings).
AUDIO_FIELDS = (
    "audio_filepath",
    "offset",
    "duration",
    "context_audio_filepath",
    "context_audio_offset",
    "context_audio_duration",
)
AUDIO_FILES = ("target", "context", "target_index", "context_index")  # ShardFiles' audio files


def shard_keys(
    lines: list[bytes], records: list[dict], settings: EncodeSettings, indexed: bool = False
) -> tuple[str, str]:
    """(what a shard's files are made of: its records' lines and the settings; what its audio files are
    made of: its records' audio spans in order and the settings). The audio key goes to the shard's
    stats: a codes shard is keyed by it (sharflow.codes.shard). Not the audio root: a corpus read from
    another folder or from object storage is the same audio, and gives the same bytes. An indexed
    shard's keys say so (its files are others; an unindexed one's keys are those before indexes)."""
    plain = {k: v for k, v in asdict(settings).items() if k != "audio_root"}  # the same audio elsewhere
    if indexed:
        plain["indexed"] = True
    whole = content_key(hashlib.blake2b(b"".join(lines)).hexdigest(), plain)
    audio = content_key([[r[k] for k in AUDIO_FIELDS] for r in records], plain)
    return whole, audio


def _kept_files(resume: ResumableJob, shard: str, files: list[str]) -> ShardFiles:  # (in named() order)
    return ShardFiles(*(str(resume.kept_path(shard, i, path)) for i, path in enumerate(files)))


def write_planned(files: DatasetFiles, settings: EncodeSettings, workers: int = 1) -> list[dict]:
    """Every shard of the plan at `files.shard_plan`, job after job in this process (for tests and
    benchmarks; the workflow runs the jobs), each from its job's inputs file."""
    plan = read_json(files.shard_plan)
    stats = []
    for block, count in planned_jobs(plan, plan["shards_per_job"]):
        size = block_size(block)
        members = block_members(block, size, count)
        outputs = {
            f"{k}_{m}": v for m, shard in enumerate(members) for k, v in files.shard(shard).named().items()
        }
        stats += write_shards(
            members, outputs, inputs=files.shar_input(block, size, count), settings=settings, workers=workers
        )
    return stats


def run_shar_job(members: list[str], outputs, *, inputs: str, settings: dict, workers: int = 1) -> list[dict]:
    """A shar job (sharflow.work.jobs): its shards (write_shards) from its `inputs` file, each kept as
    it is finished, so that a rerun (killed, or run again for another shard's changed records) makes
    only the shards whose records changed; then its record."""
    with ResumableJob(outputs["job"], members) as resume:
        stats = write_shards(
            members,
            outputs,
            inputs=inputs,
            settings=EncodeSettings(**settings),
            workers=workers,
            resume=resume,
        )
        finish_job(outputs, members)
    return stats


def rewrite_metadata(shard: int, records: list[dict], out: ShardFiles, kept: ShardFiles) -> dict | None:
    """A shard whose audio files are kept (`out.target`, `out.context`: its records' audio spans and
    contexts are what they were) and whose records' text, speaker or other metadata changed: its cuts
    file, catalog fragment, rejects and stats written again from `records`, what each cut's audio is
    taken from the `kept` shard's catalog fragment, rejects and stats. The cuts are the bytes
    write_shard would write from these records. None if the kept shard does not hold exactly these
    records' cuts in this order (the caller writes the shard whole)."""
    start = time.perf_counter()
    audio = pq.read_table(
        kept.catalog,
        columns=["cut_id", "sample_rate", "num_samples", "context_sample_rate", "context_num_samples"],
    ).to_pylist()
    with open(kept.rejected, encoding="utf-8") as f:
        rejects = {row["cut_id"]: row for row in map(json.loads, f)}
    kept_ids = [row["cut_id"] for row in audio]
    ids = [cut_id(r) for r in records]
    if [c for c in ids if c not in rejects] != kept_ids or len(ids) != len(kept_ids) + len(rejects):
        return None
    summary = read_json(kept.stats)
    tmp = _fresh_work_dir(Path(out.stats).parent, shard)
    try:
        rows, rejected = [], []
        spans = iter(audio)
        with open(tmp / "cuts.jsonl", "w", encoding="utf-8") as cuts_w:
            for record, cid in zip(records, ids, strict=True):
                if cid in rejects:
                    rejected.append(
                        reject_row(rejects[cid]["reason"], rejects[cid]["detail"], record, cut_id=cid)
                    )
                    continue
                cut, span = cut_dict(record), next(spans)
                cuts_w.write(cut_line(cut))
                target = EncodedAudio(b"", span["sample_rate"], span["num_samples"], 0, 0)
                context = EncodedAudio(b"", span["context_sample_rate"], span["context_num_samples"], 0, 0)
                written = WrittenCut(cid, "", cut["supervisions"][0]["language"], target, context)
                rows.append(_catalog_row(record, written, shard, len(rows)))
        cuts = _finish_cuts(tmp, indexed=out.cuts_index is not None)
        write_fragment(rows, str(tmp / "catalog.parquet"))
        summary["bytes"]["cuts"] = (tmp / cuts).stat().st_size
        summary["seconds"] = round(time.perf_counter() - start, 3)
        _publish(tmp, out, summary, rejected, fields=("cuts_index", "cuts", "catalog"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("shard %d: %d cuts written again with their records' new metadata, audio kept", shard, len(rows))
    return summary


def _fresh_work_dir(jobs_dir: Path, shard: int) -> Path:
    """A new temp folder for the shard's files, after removing what a killed run of it left: its temp
    folder, and the temp file of an output it was writing (its stats, say)."""
    jobs_dir.mkdir(parents=True, exist_ok=True)
    for stale in jobs_dir.glob(f".shard-{shard_key(shard)}.*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".shard-{shard_key(shard)}.", dir=jobs_dir))


@dataclass
class _Written:
    """What a shard job wrote: its ledger, its figures, the reject rows and the catalog rows."""

    ledger: Ledger
    figures: Counter = field(default_factory=Counter)
    rejected: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)

    def add(self, record: dict, result, shard: int) -> str | None:
        """Account for one record's result; the cut's cuts.jsonl line, or None if it was rejected."""
        if not isinstance(result, WrittenCut):
            reason, detail = result
            self.rejected.append(reject_row(reason, detail, record, cut_id=cut_id(record)))
            self.ledger.reject(reason)
            return None
        self.rows.append(_catalog_row(record, result, shard, len(self.rows)))
        self.ledger.keep(record["duration"])
        _count_cut(self.figures, record, result.target, result.context)
        return result.line


def _write_fields(
    records: list[dict], tmp: Path, shard: int, settings: EncodeSettings, workers: int
) -> _Written:
    """Write the three field files of `records` in `tmp`, the audio work done in `workers` processes.

    Each worker task (sharflow.shar.shard.write_batch) encodes or copies a batch's spans and writes the
    tar members of its complete cuts to two segment files of its own; here the segments are
    appended to the field files in batch order, so the audio bytes never cross a pipe and the
    files are the same for any worker count. A cut goes to every field (and the catalog) or to none.
    """
    written = _Written(Ledger("shar", f"shard {shard}"))
    segments = workers > 1  # else one process: members straight into the field files
    if segments:
        (tmp / "segments").mkdir()
    tasks = [
        (str(tmp / "segments" / f"{i:06d}"), records[i : i + TASK_RECORDS])
        for i in range(0, len(records), TASK_RECORDS)
    ]
    with (
        open(tmp / "cuts.jsonl", "w", encoding="utf-8") as cuts_w,
        TarMemberWriter(str(tmp / "target.tar")) as target_w,
        TarMemberWriter(str(tmp / "context.tar")) as context_w,
        tqdm(total=len(records), desc=f"shard {shard:06d}", unit="cut", mininterval=5) as progress,
    ):
        if segments:
            done = ordered_map(partial(write_batch, settings), tasks, workers)
        else:
            fields = (target_w.file, context_w.file)
            done = ((task, write_batch(settings, task, fields)) for task in tasks)
        for (segment, batch), results in done:
            if segments:
                target_w.append_segment(segment + ".target")
                context_w.append_segment(segment + ".context")
            for record, result in zip(batch, results, strict=True):
                progress.update()
                line = written.add(record, result, shard)
                if line is not None:
                    cuts_w.write(line)
    return written


@contextmanager
def _segment_files(segment: str) -> Iterator[tuple[BinaryIO, BinaryIO]]:
    with open(segment + ".target", "wb") as target_f, open(segment + ".context", "wb") as context_f:
        yield target_f, context_f


class WrittenCut(NamedTuple):
    """A cut whose members a worker wrote: its cuts.jsonl line, and what the stats and catalog need."""

    cut_id: str
    line: str
    language: str
    target: EncodedAudio  # without its bytes (they are in the segment file)
    context: EncodedAudio


def write_batch(
    settings: EncodeSettings, task: tuple[str, list[dict]], fields: tuple[BinaryIO, BinaryIO] | None = None
) -> list:
    """Worker task: the audio of a batch of records, written as tar members to `<segment>.target`
    and `<segment>.context`, or to the open `fields` (target, context) when given (a complete
    cut's members to both, a failed cut's to neither).

    Returns, per record, (reason, detail) of a rejected cut or the WrittenCut.
    """
    segment, records = task
    results: list = []
    with (
        _segment_files(segment) if fields is None else nullcontext(fields) as (target_f, context_f),
        containers.prefetched(batch_audio(settings.audio_root, records)),
    ):
        for record in records:
            result = encode_record(settings, record)
            if isinstance(result[0], str):
                results.append(result)
                continue
            target, context = result
            cut = cut_dict(record)
            line = cut_line(cut)  # everything for this cut exists before any of it is written
            ctx_id = segment_id(
                record["context_audio_filepath"],
                record["context_audio_offset"],
                record["context_audio_duration"],
            )
            audio_name, meta_name = audio_member_names(cut["id"], settings.audio_format)
            for f, audio, seg, duration in (
                (target_f, target, cut["id"], record["duration"]),
                (context_f, context, ctx_id, record["context_audio_duration"]),
            ):
                write_member(f, audio_name, audio.data)
                write_member(
                    f, meta_name, placeholder_bytes(seg, audio.sampling_rate, audio.num_samples, duration)
                )
            language = cut["supervisions"][0]["language"]
            bare_target, bare_context = replace(target, data=b""), replace(context, data=b"")
            results.append(WrittenCut(cut["id"], line, language, bare_target, bare_context))
    return results


def batch_audio(audio_root: str, records: list[dict]) -> list[str]:
    """The audio a batch reads, in its reading order (each record's target, then its context): what
    its members on object storage are fetched from (containers.prefetched: by range, adjacent ones in
    one request)."""
    paths = []
    for record in records:
        for key in ("audio_filepath", "context_audio_filepath"):
            try:
                paths.append(resolve_audio_path(audio_root, record[key])[0])
            except Exception:
                continue
    return paths


def _catalog_row(record: dict, cut: WrittenCut, shard: int, position: int) -> dict:
    return catalog_row(
        record,
        cut_id=cut.cut_id,
        shard=shard,
        position=position,
        language=cut.language,
        target=(cut.target.sampling_rate, cut.target.num_samples),
        context=(cut.context.sampling_rate, cut.context.num_samples),
    )


def _count_cut(stats: Counter, record: dict, target: EncodedAudio, context: EncodedAudio) -> None:
    stats["target_seconds"] += record["duration"]
    stats["context_seconds"] += record["context_audio_duration"]
    stats["clipped_samples"] += target.clipped + context.clipped
    stats["clipped_cuts"] += bool(target.clipped or context.clipped)
    stats["padded_cuts"] += bool(target.padded or context.padded)
    stats["copied_spans"] += target.copied + context.copied
    stats["encoded_spans"] += (not target.copied) + (not context.copied)


def _shard_summary(shard: int, written: _Written, tmp: Path, cuts: str, seconds: float) -> dict:
    stats = written.figures
    return {
        "shard": shard,
        "records_in": written.ledger.records_in,
        "cuts": written.ledger.records_out,
        "rejected": dict(sorted(written.ledger.rejected.items())),
        "target_seconds": round(stats["target_seconds"], 3),
        "context_seconds": round(stats["context_seconds"], 3),
        "clipped_samples": stats["clipped_samples"],
        "clipped_cuts": stats["clipped_cuts"],
        "padded_cuts": stats["padded_cuts"],
        "copied_spans": stats["copied_spans"],
        "encoded_spans": stats["encoded_spans"],
        "bytes": {
            "cuts": (tmp / cuts).stat().st_size,
            "target_audio": (tmp / "target.tar").stat().st_size,
            "context_audio": (tmp / "context.tar").stat().st_size,
        },
        "seconds": round(seconds, 3),
    }


_MADE = {  # what each of ShardFiles' Shar files is made as in the temp folder
    "cuts_index": "cuts.jsonl.idx",
    "cuts": "cuts.jsonl",  # cuts.jsonl.gz in an unindexed set (_publish)
    "target_index": "target.tar.idx",
    "target": "target.tar",
    "context_index": "context.tar.idx",
    "context": "context.tar",
    "catalog": "catalog.parquet",
}


def _finish_cuts(tmp: Path, indexed: bool, tars: tuple[str, ...] = ()) -> str:
    """The cuts file (and `tars`) of a shard in its temp folder made final: indexed, each file's
    index beside it (sharflow.core.shar_index); else the cuts gzipped. Returns the cuts file's name."""
    if not indexed:
        _finish_gzip(tmp / "cuts.jsonl", tmp / "cuts.jsonl.gz")
        return "cuts.jsonl.gz"
    for name in ("cuts.jsonl", *tars):
        write_index(str(tmp / name))
    return "cuts.jsonl"


def _publish(
    tmp: Path, out: ShardFiles, summary: dict, rejected: list[dict], fields: tuple[str, ...] = tuple(_MADE)
) -> None:
    """Rename the `fields`' files into place (each index just before its file: a Shar file is never
    seen without its index), then write the rejects and, last, the stats."""
    for name in fields:
        dst = getattr(out, name)
        if dst is None:  # an index, in an unindexed set
            continue
        made = "cuts.jsonl.gz" if name == "cuts" and out.cuts_index is None else _MADE[name]
        src = tmp / made
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
    with atomic_file(out.rejected, "w", encoding="utf-8") as f:
        for r in rejected:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    write_json(out.stats, summary)


def _log_shard(summary: dict) -> None:
    if summary["clipped_samples"]:
        log.warning(
            "shard %d: %d samples beyond [-1, 1] clipped in %d cuts",
            summary["shard"],
            summary["clipped_samples"],
            summary["clipped_cuts"],
        )
    log.info(
        "shard %d: %d cuts, %d rejected, %.1f s target audio in %.1f s; %d spans copied through, %d encoded",
        summary["shard"],
        summary["cuts"],
        sum(summary["rejected"].values()),
        summary["target_seconds"],
        summary["seconds"],
        summary["copied_spans"],
        summary["encoded_spans"],
    )


def _finish_gzip(src: Path, dst: Path) -> None:
    """gzip with a fixed header (no name, mtime 0), so equal content gives equal bytes."""
    with (
        open(src, "rb") as f,
        open(dst, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
    ):
        shutil.copyfileobj(f, gz)
