"""Shard jobs: which job makes which shards, what it writes, and how a lost or partial job is found.

A Shar set's shards are made by jobs over *blocks* of shards: the shar stage's (cuts, target and
context audio) and, per codec, the codes stage's. Fewer, longer jobs keep Snakemake's DAG small and
load a model once per rank and job. This module is the one place that says how; the rules
(rules/shar.smk, rules/codes.smk and their input functions in sharflow.workflow.shards), the job scripts
and the tests ask it.

- **Blocks.** A block key is a shard key without its last digits: block 00012 stands for the ten
  shards 000120-000129, block 0001 for the hundred shards 000100-000199 (blocks.block_members).
- **The plan's jobs** (`plan_jobs`, `planned_jobs`): blocks of `<stage>.shards_per_job` shards; where
  the plan ends inside one, blocks a tenth the size down to 10; then one job for the last 2-9 shards
  (a block of 10 with fewer members) or the last one. 123 shards at 100 per job: 000 (100), 00010 and
  00011 (10 each), 00012 (the last 3). A plan grows by generations (sharflow.shar.plan), each from a
  multiple of 10 and made by jobs of its own, so the jobs of the shards already made never change.
- **Rules** (`job_kinds`): a rule per kind of job, `<stage>_block` (shards_per_job shards),
  `<stage>_block<size>` (the smaller blocks), `<stage>_tail<n>` (the last n = 2-9) and
  `<stage>_shard` (one). Snakemake needs a rule's outputs from its wildcards alone, so each kind
  names all its shards' files, and a shard's file matches a rule of every kind; the rules' input
  functions give a kind the plan does not have for that block an input no rule makes
  (layout.DatasetFiles.beyond_the_plan), and Snakemake takes the next kind.
- **What a job writes**: each member shard's files, every one renamed into place whole, then last
  its record (`shards-<first>-<last>.json`, `write_job_record`): the shards, the size of every file
  it wrote, and when it finished. Jobs after the shard jobs list these records, one per job, not
  every shard's files (a 10,000-shard DAG lists ~1,000 files per stage).
- **A lost or damaged shard file** (`damage`): every run checks each record's files against one
  listing per folder (`Listing`, an os.scandir each); a job with a file that is missing or not the
  size it wrote runs again, forced by its shard rule's input function (sharflow.workflow.shards:
  rerun_if_damaged), so a dry run plans exactly that job and what follows, and its rerun writes the
  same bytes again. Nothing here removes or writes a file: the check runs on every look (a dry run,
  --dag, a Slurm job's own parse), and looking changes nothing; the rerun replaces the record.
- **A job run again keeps what did not change** (sharflow.work.resume): the shards a job makes are
  kept, by key, in its `.kept` folder; its rerun (killed, or run for another shard's corrected
  records) puts back each shard whose key is the same instead of making it again.
"""

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sharflow.core.atomic import write_json
from sharflow.core.blocks import block_digits, generations, shard_key

STAGES = ("shar", "codes")


@dataclass(frozen=True)
class JobKind:
    """A kind of shard job, one rule each: its rule name, its block size, how many shards it makes."""

    name: str
    size: int
    count: int


def job_kinds(stage: str, shards_per_job: int) -> list[JobKind]:
    """The kinds of job of a stage (shar or codes), in the order Snakemake tries them for a file:
    <stage>_block, <stage>_block<size> for each smaller block size down to 10, <stage>_tail<n> for
    n = 9..2, <stage>_shard."""
    sizes = [10**k for k in range(block_digits(shards_per_job), 0, -1)]
    kinds = [JobKind(f"{stage}_block" if s == shards_per_job else f"{stage}_block{s}", s, s) for s in sizes]
    kinds += [JobKind(f"{stage}_tail{n}", 10, n) for n in range(9, 1, -1) if sizes]
    return [*kinds, JobKind(f"{stage}_shard", 1, 1)]


def plan_jobs(num_shards: int, shards_per_job: int, first: int = 0) -> list[tuple[str, int]]:
    """(block key, shards) of every job that makes `num_shards` shards from shard `first` (0, or a
    generation's first: a multiple of 10), in order: at each point the largest block that starts
    there and fits (shards_per_job, then a tenth the size down to 10), then one job for the last 2-9
    shards (a block key of 10 with fewer members) or the last one (its shard key). 123 shards at 100
    per job: 000 (100), 00010, 00011 (10 each), 00012 (3)."""
    if shards_per_job == 1:
        return [(shard_key(s), 1) for s in range(first, first + num_shards)]
    if first % 10:
        raise ValueError(f"a generation starts at a multiple of 10, not at shard {first}")
    sizes = [10**d for d in range(block_digits(shards_per_job), 0, -1)]
    jobs, start, end = [], first, first + num_shards
    while end - start >= 10:
        size = next(s for s in sizes if start % s == 0 and start + s <= end)
        jobs.append((shard_key(start)[: -block_digits(size)], size))
        start += size
    if end - start == 1:
        jobs.append((shard_key(start), 1))
    elif end > start:
        jobs.append((shard_key(start)[:-1], end - start))
    return jobs


def planned_jobs(plan: dict, shards_per_job: int) -> list[tuple[str, int]]:
    """(block key, shards) of every job of a plan: plan_jobs of each generation in turn."""
    return [job for g in generations(plan) for job in plan_jobs(g["shards"], shards_per_job, g["first"])]


def write_job_record(path: str, members: list[str], files: Iterable[str]) -> None:
    """A shard job's record, written last: the shards it made, the size of every file it wrote (by
    path relative to the record's folder, so that a results tree can move), and when it finished.
    The time makes each run's record differ: Snakemake passes over an input newer than its job's
    outputs whose checksum it has seen before, and a rerun job must rerun what lists it."""
    folder = Path(path).parent
    sizes = {os.path.relpath(f, folder): os.stat(f).st_size for f in sorted(files)}
    write_json(path, {"shards": members, "files": sizes, "finished": datetime.now(UTC).isoformat()})


def finish_job(outputs, members: list[str]) -> None:
    """What a shard job does last, given its named outputs (a Snakemake job's): its record, with the
    size of every other output."""
    write_job_record(outputs["job"], members, [p for name, p in outputs.items() if name != "job"])


class Listing:
    """Sizes of the files in folders, one os.scandir per folder (again only when the folder changes):
    checking 10,000 shards' files costs a listing of each field folder, not 70,000 stat calls."""

    def __init__(self):
        self.folders: dict[str, tuple[int, dict[str, int]]] = {}

    def size(self, path: str) -> int | None:
        """The size of the file at `path`, None if there is none."""
        folder, name = os.path.split(path)
        try:
            stamp = os.stat(folder or ".").st_mtime_ns
        except FileNotFoundError:
            return None
        cached = self.folders.get(folder)
        if cached is None or cached[0] != stamp:
            with os.scandir(folder or ".") as entries:
                sizes = {e.name: e.stat().st_size for e in entries if e.is_file()}
            self.folders[folder] = cached = (stamp, sizes)
        return cached[1].get(name)


def damage(record: str, listing: Listing) -> list[str]:
    """What is wrong with a finished job's files: each missing, or of another size than the job wrote
    (its record says); [] when all are whole, when there is no record (the job has not run) or when
    the record names no sizes (written before sizes were recorded)."""
    try:
        with open(record, encoding="utf-8") as f:
            files = json.load(f).get("files", {})
    except FileNotFoundError:
        return []
    folder = os.path.dirname(record)
    wrong = []
    for rel, size in files.items():
        path = os.path.normpath(os.path.join(folder, rel))
        found = listing.size(path)
        if found != size:
            wrong.append(
                f"{path} is missing" if found is None else f"{path} is {found} bytes, its job wrote {size}"
            )
    return wrong
