"""The shar stage's plan (a Snakemake checkpoint) and the ids of cuts and recordings.

A seeded shuffle of with_context.jsonl (grouped by speaker, so training needs it mixed) into shards
of `shard_size` records, in generations as the corpus grows (below). shard_plan.json holds the
generations and each shard's counts; each shar job's records, in shard order, are its inputs file
(shar_inputs/shards-<first>-<last>.jsonl), so a job reads only its own records and a job whose
records did not change has inputs Snakemake sees unchanged. Imports neither lhotse nor torch.
"""

import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.core.blocks import block_members, block_size, job_file_name
from sharflow.core.errors import SharflowError
from sharflow.identity.links import HELD_OUT_REASONS
from sharflow.io.containers import split_member
from sharflow.work.jobs import plan_jobs, planned_jobs

log = logging.getLogger(__name__)


# ---- ids ----------------------------------------------------------------------------------------


def recording_id(audio_filepath: str) -> str:
    """A recording id from a path relative to the audio root: extension dropped, `/` -> `-`. A member
    of a container (`EN-B000000.tar#EN_B00000_S00000_W000000.mp3`) is named by its member's path:
    the same clip gives the same id as a loose file or inside its tar."""
    audio_filepath = split_member(audio_filepath)[1] or audio_filepath
    stem = audio_filepath.rsplit(".", 1)[0] if "." in Path(audio_filepath).name else audio_filepath
    return stem.replace("/", "-")


def segment_id(audio_filepath: str, offset: float, duration: float) -> str:
    """A stable id for a span of a file, at 10 µs resolution (two segments never collide)."""
    return f"{recording_id(audio_filepath)}-{round(offset * 1e5)}-{round(duration * 1e5)}"


def cut_id(record: dict) -> str:
    return segment_id(record["audio_filepath"], record["offset"], record["duration"])


# ---- plan ---------------------------------------------------------------------------------------
# A plan is one or more generations of shards. The first is a seeded shuffle of every record into
# shards of shard_size from shard 0; when the corpus grows, the records already planned stay in their
# shards (frozen: their job's inputs are not rewritten, so Snakemake runs no job of theirs), and the
# new ones are shuffled into a new generation that starts at the next multiple of 10 (so that its
# jobs are blocks of their own: sharflow.work.jobs), leaving unused shard numbers between.


@dataclass
class _Records:
    """The records of a Shar set in with_context.jsonl: per record its cut id's and content's 64-bit
    hashes, byte offset and duration (arrays: 28 bytes a record, never the records)."""

    ids: np.ndarray
    content: np.ndarray
    offsets: np.ndarray
    seconds: np.ndarray
    held_out: Counter


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def content_key(record: dict) -> int:
    """What a planned record's shard is made of besides its cut id: its text, what the model reads, its
    speaker, its source, its context clip and that clip's text (a hash of those fields). A record
    whose key changed is looked at again (_correction)."""
    fields = {k: record.get(k) for k in (*CONTENT_FIELDS, *CONTEXT_FIELDS)}
    return _hash(json.dumps(fields, sort_keys=True, ensure_ascii=False))


# What a correction of a planned record changes: its cuts line (and its shard's audio if its speaker,
# and so its context, changed). A changed source_audio is new audio under the same cut id: refused.
CONTENT_FIELDS = ("text", "normalized_text", "speaker", "lang", "tokenizer_names", "source_audio")
CONTEXT_SPAN = ("context_audio_filepath", "context_audio_offset", "context_audio_duration")
CONTEXT_FIELDS = (*CONTEXT_SPAN, "context_audio_text", "context_audio_normalized_text")


def _read_records(with_context: str, split: str | None) -> _Records:
    ids, content, offsets, seconds = [], [], [], []
    held_out: Counter[str] = Counter()
    with open(with_context, "rb") as f:
        offset = 0
        for raw in f:
            record = json.loads(raw)
            if split is None or record["split"] == split:
                ids.append(_hash(cut_id(record)))
                content.append(content_key(record))
                offsets.append(offset)
                seconds.append(record["duration"])
            else:
                held_out[record["split"]] += 1
            offset += len(raw)
    return _Records(
        np.asarray(ids, dtype=np.uint64),
        np.asarray(content, dtype=np.uint64),
        np.asarray(offsets, dtype=np.int64),
        np.asarray(seconds, dtype=np.float64),
        held_out,
    )


def plan_shards(
    with_context: str,
    *,
    plan: str,
    inputs_dir: str,
    shard_size: int,
    seed: int,
    shards_per_job: int = 10,
    split: str | None = None,
    grow: str = "append",
    leaks: str = "report",
    held_out_rejects: str | None = None,
    indexed: bool = True,
) -> dict:
    """Plan the Shar set's shards and write, per shar job (sharflow.work.jobs), the records it writes
    (its inputs file in `inputs_dir`, rewritten only when they change), and the `plan` JSON.

    With `split` (splits configured), only that split's records: the others are counted in the
    plan's `held_out`. With `grow: append` and an earlier plan of the same shard_size, seed and
    shards_per_job, records already planned keep their shards (the module comment above), records
    gone since leave theirs (only those shards' jobs run again), and new ones go to a new
    generation; otherwise (`grow: rebuild`, or other settings) every record is planned afresh.
    A record gone since because the splits job found it to be held-out audio (a reject of a
    held-out reason in `held_out_rejects`, the dataset's splits rejects folder) is a **leak** in a
    shard already made: with `leaks: report` it stays in its shard (the shard is not remade) and
    is listed in the plan's `leaks` with its shard and reason, and said in the log; with `leaks:
    rebuild` it leaves like any record gone. `indexed` (shar.index: the files' layout) goes into the plan.
    A planned record whose text or other metadata changed takes its new line in its shard (listed in
    the plan's `corrected`: only that shard's job runs again, and writes only what changed).
    Raises SharflowError if two records would get the same cut id, or if a planned record's source
    audio changed under its cut id.
    """
    records = _read_records(with_context, split)
    _check_unique_ids(records.ids, with_context)
    settings = {"shard_size": shard_size, "seed": seed, "shards_per_job": shards_per_job}
    kept_plan = str(Path(inputs_dir) / KEPT_PLAN)
    earlier = _earlier_plan(kept_plan, settings, grow)
    if leaks not in LEAK_ACTIONS:
        raise SharflowError(f"shar.leaks must be one of {LEAK_ACTIONS}, got {leaks!r}")
    leaked = held_out_cut_ids(held_out_rejects) if leaks == "report" and held_out_rejects else {}
    kept = _keep(earlier, records, with_context, inputs_dir, leaked) if earlier else _Kept()
    generation = _new_generation(records, kept, settings, split)
    jobs = kept.jobs + _write_new(generation, records, with_context, inputs_dir, shards_per_job)
    _remove_stale_inputs(inputs_dir, jobs)
    planned = {**_plan_json(records, kept, generation, settings, split), "indexed": indexed}
    _list_kept_changes(planned, kept, plan)
    write_json(kept_plan, planned)
    write_json(plan, planned)
    log.info(
        "shar plan: %d records into %d shards of %d (seed %d); %d generation(s), %d new record(s), "
        "%d removed",
        planned["records"],
        planned["num_shards"],
        shard_size,
        seed,
        len(planned["generations"]),
        len(generation.order),
        len(kept.removed),
    )
    return planned


def _check_unique_ids(hashes: np.ndarray, path: str) -> None:
    ordered = np.sort(hashes)
    clash = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(clash):
        lines = []
        with open(path, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                cid = cut_id(json.loads(raw))
                if _hash(cid) == clash[0]:
                    lines.append(f"line {line_no} ({cid})")
        raise SharflowError(
            f"{path}: records {' and '.join(lines)} map to the same cut id; two audio files differ only "
            "in '/' vs '-' or in their extension. Rename one of them."
        )


# Snakemake deletes the checkpoint's output (the plan) before it runs the plan again: the copy beside
# the jobs' inputs is what a grown corpus's plan keeps from the earlier one.
KEPT_PLAN = "plan.json"
LEAK_ACTIONS = ("report", "rebuild")


def held_out_cut_ids(rejected_dir: str) -> dict[str, dict]:
    """{cut id: {reason, detail}} of the records a splits job rejected for being held-out audio
    (sharflow.identity.links.HELD_OUT_REASONS), from its rejects folder."""
    out = {}
    for reason in HELD_OUT_REASONS:
        path = Path(rejected_dir) / f"{reason}.jsonl"
        if path.exists():
            with open(path, encoding="utf-8") as f:
                for text in f:
                    row = json.loads(text)
                    out[cut_id(json.loads(row["original"]))] = {"reason": reason, "detail": row["detail"]}
    return out


def _warn_leaks(leaks: list[dict], plan: str) -> None:
    log.warning(
        "sharflow: %d record(s) in shards made before are now found to be held-out audio and stay "
        "there (shar.leaks: report): %s%s. Set shar.leaks: rebuild and rerun to remake those shards "
        "without them (the list is in %s under 'leaks')",
        len(leaks),
        "; ".join(f"shard {x['shard']}: {x['cut_id']} ({x['reason']})" for x in leaks[:5]),
        " ..." if len(leaks) > 5 else "",
        plan,
    )


def _list_kept_changes(planned: dict, kept: "_Kept", plan: str) -> None:
    """The leaks and corrections among the records kept in their shards: into the plan, and the log."""
    if kept.leaks:
        planned["leaks"] = kept.leaks
        _warn_leaks(kept.leaks, plan)
    if kept.corrected:
        planned["corrected"] = kept.corrected
        _say_corrected(kept.corrected)


def _say_corrected(corrected: list[dict]) -> None:
    shards = sorted({c["shard"] for c in corrected})
    audio = sorted({c["shard"] for c in corrected if _new_audio(c)})
    log.info(
        "shar plan: %d record(s) in shards made before changed under their cut ids: %s%s. Their shards (%s) "
        "are written again: their cuts files%s",
        len(corrected),
        "; ".join(f"shard {c['shard']}: {c['cut_id']} ({', '.join(c['fields'])})" for c in corrected[:5]),
        " ..." if len(corrected) > 5 else "",
        ", ".join(map(str, shards)),
        f", and the audio and codes of shards {', '.join(map(str, audio))} (a new speaker, a new context)"
        if audio
        else "",
    )


def _new_audio(correction: dict) -> bool:
    """Whether a correction moved its record's context clip (a new speaker): its shard's audio changes."""
    return bool(set(CONTEXT_SPAN) & set(correction["fields"]))


def correction_notes(corrected: list[dict], shards: set[int]) -> list[str]:
    """What a shar job over `shards` does for the plan's `corrected` records among them, a line a shard:
    which records changed and how, and what of the shard is kept."""
    notes = []
    for shard in sorted({c["shard"] for c in corrected} & shards):
        here = [c for c in corrected if c["shard"] == shard]
        audio = any(_new_audio(c) for c in here)
        notes.append(
            f"shard {shard} is written again: {len(here)} record(s) changed since it was made ("
            + "; ".join(f"{c['cut_id']}: {', '.join(c['fields'])}" for c in here[:3])
            + (" ..." if len(here) > 3 else "")
            + (
                "); its audio and codes are made again (a new speaker, a new context)"
                if audio
                else "); its cuts file, catalog fragment and stats only: its audio and codes are kept"
            )
        )
    return notes


# ---- what an earlier plan keeps -----------------------------------------------------------------


@dataclass
class _Kept:
    """The earlier plan's shards that stay: their jobs, generations, shard figures and record ids, and
    the cut ids of the records gone since."""

    jobs: list[tuple[str, int]] = field(default_factory=list)
    generations: list[dict] = field(default_factory=list)
    shards: list[dict] = field(default_factory=list)
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    removed: list[str] = field(default_factory=list)
    leaks: list[dict] = field(default_factory=list)  # held-out records kept in their shards
    corrected: list[dict] = field(default_factory=list)  # records whose metadata changed: their new lines

    @property
    def next_first(self) -> int:
        """Where a new generation starts: the next multiple of 10 after the last planned shard."""
        if not self.generations:
            return 0
        last = max(g["first"] + g["shards"] for g in self.generations)
        return -(-last // 10) * 10


def _earlier_plan(plan: str, settings: dict, grow: str) -> dict | None:
    """The earlier plan (its copy `plan`) if its shards are to be kept: grow is append and it was made
    with the same shard_size, seed and shards_per_job (else every record is planned afresh, said in
    the log)."""
    if grow != "append" or not Path(plan).exists():
        return None
    earlier = read_json(plan)
    if "generations" not in earlier:
        return None
    if {k: earlier.get(k) for k in settings} != settings:
        log.warning(
            "shar plan: %s was made with %s, now %s: every shard is planned again (and remade)",
            plan,
            {k: earlier.get(k) for k in settings},
            settings,
        )
        return None
    return earlier


def _keep(earlier: dict, records: _Records, with_context: str, inputs_dir: str, leaked: dict) -> _Kept:
    """Read every job's inputs of the earlier plan, one job at a time: what stays, what is gone (those
    jobs' inputs rewritten without it; a record in `leaked` stays and is listed), and what was
    corrected (its new line in its place: _correction)."""
    kept = _Kept(generations=earlier["generations"])
    lookup = _Lookup(records)
    seconds = {s["index"]: s["seconds"] for s in earlier["shards"]}
    ids = []
    with open(with_context, "rb") as now:
        for block, count in planned_jobs(earlier, earlier["shards_per_job"]):
            path = job_inputs_path(inputs_dir, block, count)
            shards = read_job_inputs(path)
            staying, changed = {}, False
            for shard, lines in shards.items():
                staying[shard] = []
                for raw in lines:
                    record = json.loads(raw)
                    found = lookup.find(record)
                    if found is None and cut_id(record) in leaked:
                        kept.leaks.append(
                            {"shard": int(shard), "cut_id": cut_id(record), **leaked[cut_id(record)]}
                        )
                        staying[shard].append(raw)
                        continue
                    if found is None:
                        kept.removed.append(cut_id(record))
                        changed = True
                        continue
                    key, at = found
                    if int(records.content[at]) != content_key(record):
                        correction = _correction(record, _line_at(now, int(records.offsets[at])))
                        if correction is not None:
                            raw, fields = correction
                            kept.corrected.append(
                                {"shard": int(shard), "cut_id": cut_id(record), "fields": fields}
                            )
                            changed = True
                    staying[shard].append(raw)
                    ids.append(key)
            for shard, lines in staying.items():
                removed = len(lines) != len(shards[shard])
                kept.shards.append(
                    _shard_figures(int(shard), lines) if removed else _unchanged(shard, lines, seconds)
                )
            if changed:
                write_job_inputs(path, staying)
            kept.jobs.append((block, count))
    kept.ids = np.asarray(ids, dtype=np.uint64)
    return kept


def _line_at(f, offset: int) -> bytes:
    f.seek(offset)
    return f.readline()


def _correction(old: dict, line: bytes) -> tuple[bytes, list[str]] | None:
    """A planned record's line now (`line`) against the one its shard was made from (`old`): the line
    its shard is to be made from and the fields that changed, or None if the old line stays.

    Its text, normalized text, language, tokenizers or speaker changed: it is corrected, and takes
    every field of the new line but its context (the clip its shard holds stays), unless its speaker
    changed (then its new context too: its shard's audio is made again). Its context clip's text
    changed, the clip the same: corrected likewise. Its context choice alone changed: the old line
    stays (a grown corpus does not move a made shard's context). Its source audio changed: refused,
    that is other audio under the same cut id."""
    new = json.loads(line)
    if old.get("source_audio") != new.get("source_audio"):
        _refuse_changed(old, new, ["source_audio"])
    same_clip = all(old.get(k) == new.get(k) for k in CONTEXT_SPAN)
    if old.get("speaker") == new.get("speaker") and not same_clip:
        new = {**new, **{k: v for k, v in old.items() if k.startswith("context_")}}
        line = (json.dumps(new, ensure_ascii=False) + "\n").encode()
    changed = [k for k in (*CONTENT_FIELDS, *CONTEXT_FIELDS) if old.get(k) != new.get(k)]
    return (line, changed) if changed else None


def _unchanged(shard: str, lines: list[bytes], seconds: dict) -> dict:
    return {"index": int(shard), "records": len(lines), "seconds": seconds[int(shard)]}


def _shard_figures(shard: int, lines: list[bytes]) -> dict:
    return {
        "index": shard,
        "records": len(lines),
        "seconds": round(float(sum(json.loads(raw)["duration"] for raw in lines)), 3),
    }


class _Lookup:
    """A planned record's place among the current records, by its cut id (sorted hashes: no dict of
    every record)."""

    def __init__(self, records: _Records):
        self.records = records
        self.order = np.argsort(records.ids, kind="stable")
        self.sorted = records.ids[self.order]

    def find(self, record: dict) -> tuple[int, int] | None:
        """(its id hash, its index in the records) if the record is still there; None if it is gone."""
        key = np.uint64(_hash(cut_id(record)))
        i = int(np.searchsorted(self.sorted, key))
        if i == len(self.sorted) or self.sorted[i] != key:
            return None
        return int(key), int(self.order[i])


def _refuse_changed(old: dict, new: dict, changed: list[str]) -> None:
    raise SharflowError(
        f"{cut_id(old)} is in a shard already, and its {', '.join(changed)} changed since "
        f"({old.get(changed[0])!r} -> {new.get(changed[0])!r}): that is other audio under the same cut "
        "id. Give the new audio its own file name, keep the record as it was, or set shar.grow: rebuild "
        "to plan (and remake) every shard afresh"
    )


# ---- the new generation -------------------------------------------------------------------------


@dataclass
class _Generation:
    """The records not planned before (indices into _Records, in shuffled order), from shard `first`."""

    first: int
    order: np.ndarray
    num_shards: int
    shard_size: int


def _new_generation(records: _Records, kept: _Kept, settings: dict, split: str | None) -> _Generation:
    new = np.flatnonzero(~np.isin(records.ids, kept.ids))
    order = new[np.random.default_rng(settings["seed"]).permutation(len(new))]
    num_shards = math.ceil(len(order) / settings["shard_size"])
    if not kept.generations and split in (None, "train"):
        num_shards = max(1, num_shards)  # a dataset's own (train) Shar has at least one shard
    return _Generation(kept.next_first, order, num_shards, settings["shard_size"])


def _write_new(
    generation: _Generation, records: _Records, with_context: str, inputs_dir: str, per_job: int
) -> list[tuple[str, int]]:
    """Each new job's inputs: its shards' records as with_context.jsonl has them, in shard order."""
    size = generation.shard_size
    jobs = plan_jobs(generation.num_shards, per_job, first=generation.first)
    with open(with_context, "rb") as f:
        for block, count in jobs:
            shards = {}
            for shard in block_members(block, block_size(block), count):
                k = int(shard) - generation.first
                shards[shard] = []
                for i in generation.order[k * size : (k + 1) * size].tolist():
                    f.seek(int(records.offsets[i]))
                    shards[shard].append(f.readline())
            write_job_inputs(job_inputs_path(inputs_dir, block, count), shards)
    return jobs


def _remove_stale_inputs(inputs_dir: str, jobs: list[tuple[str, int]]) -> None:
    """Remove inputs files of jobs the plan no longer has (an earlier plan made afresh)."""
    wanted = {Path(job_inputs_path(inputs_dir, block, count)).name for block, count in jobs}
    for path in Path(inputs_dir).glob("*.jsonl"):
        if path.name not in wanted:
            path.unlink()


def _plan_json(
    records: _Records, kept: _Kept, generation: _Generation, settings: dict, split: str | None
) -> dict:
    size, order = generation.shard_size, generation.order
    new_shards = [
        {
            "index": generation.first + k,
            "records": int(len(order[k * size : (k + 1) * size])),
            "seconds": round(float(records.seconds[order[k * size : (k + 1) * size]].sum()), 3),
        }
        for k in range(generation.num_shards)
    ]
    generations = list(kept.generations)
    if generation.num_shards:
        generations.append(
            {"first": generation.first, "shards": generation.num_shards, "records": len(order)}
        )
    shards = kept.shards + new_shards
    return {
        "records": sum(s["records"] for s in shards),
        **settings,
        "num_shards": len(shards),
        **({"split": split, "held_out": dict(sorted(records.held_out.items()))} if split is not None else {}),
        "generations": generations,
        "removed": len(kept.removed),
        "shards": shards,
    }


# ---- a job's inputs -----------------------------------------------------------------------------


def job_inputs_path(inputs_dir: str, block: str, count: int) -> str:
    """A shar job's inputs file in `inputs_dir`: shards-<first>-<last>.jsonl (blocks.job_file_name)."""
    return str(Path(inputs_dir) / Path(job_file_name(block, block_size(block), count)).with_suffix(".jsonl"))


def write_job_inputs(path: str, shards: dict[str, list[bytes]]) -> None:
    """A job's inputs: a header line {"shards": [[shard key, records], ...]}, then each shard's records
    (JSON lines, as with_context.jsonl has them), in order. Written only when they differ from the file
    there, so a job whose inputs are the same is not run again."""
    header = json.dumps({"shards": [[shard, len(lines)] for shard, lines in shards.items()]}) + "\n"
    data = header.encode() + b"".join(lines for chunk in shards.values() for lines in chunk)
    target = Path(path)
    if target.exists() and target.read_bytes() == data:
        return
    with atomic_file(path, "wb") as f:
        f.write(data)


def read_job_inputs(path: str) -> dict[str, list[bytes]]:
    """{shard key: its records' JSON lines} of a job's inputs file, in order."""
    return dict(job_input_shards(path))


def job_input_keys(path: str) -> list[str]:
    """The shard keys of a job's inputs file, in order (its header line only)."""
    with open(path, "rb") as f:
        return [shard for shard, _ in json.loads(f.readline())["shards"]]


def job_input_shards(path: str) -> Iterator[tuple[str, list[bytes]]]:
    """(shard key, its records' JSON lines) of a job's inputs file, one shard at a time, in order: a
    shar job holds one shard's records, not its block's."""
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        for shard, n in header["shards"]:
            yield shard, [f.readline() for _ in range(n)]
