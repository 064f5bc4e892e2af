"""Shard and block numbering: a shard's key, the blocks of shards a job makes, a plan's shards.

A shard key is 6 digits (000042). A block key is a shard key without its last digits: block 00012
stands for the ten shards 000120-000129, block 0001 for the hundred 000100-000199. Which job makes
which block is sharflow.work.jobs; where each file lives, sharflow.core.layout.
"""

import os

from sharflow.core.atomic import read_json
from sharflow.core.errors import SharflowError


def shard_key(shard: int | str) -> str:
    """A shard's file key: 6 digits (000042); a wildcard pattern such as "{shard}" stays as it is."""
    return shard if isinstance(shard, str) else f"{shard:06d}"


def block_digits(shards_per_job: int) -> int:
    """How many trailing digits of a shard key number the shards of a block (shards_per_job = 10^digits)."""
    digits = len(str(shards_per_job)) - 1
    if shards_per_job != 10**digits:
        raise ValueError(f"shards per job must be a power of ten (1, 10, 100, ...), got {shards_per_job}")
    return digits


def block_size(block: str) -> int:
    """How many shards a block key stands for: 10 per digit short of a shard key (00012: 10; a shard
    key: 1)."""
    return 10 ** (len(shard_key(0)) - len(block))


def block_members(block: str, shards_per_job: int | None = None, count: int | None = None) -> list[str]:
    """The shard keys of a block, in order (block 00012: 000120 ... 000129; a shard key: itself); a
    wildcard pattern such as "{block}" gives patterns ("{block}0" ...) for the `shards_per_job` given.
    `count`: only the first `count` (the last block of a plan, where it ends inside a block of 10)."""
    shards_per_job = block_size(block) if shards_per_job is None else shards_per_job
    digits = block_digits(shards_per_job)
    count = shards_per_job if count is None else count
    return [f"{block}{m:0{digits}d}" if digits else block for m in range(count)]


def job_file_name(block: str, shards_per_job: int, count: int | None = None) -> str:
    """The file that records a block job's completion, named by its first and last shard
    (shards-000120-000129.json): one name per job, so that it matches one rule only."""
    members = block_members(block, shards_per_job, count)
    return f"shards-{members[0]}-{members[-1]}.json"


def require_made(paths) -> None:
    """Each of a finished block job's `paths` exists, else a SharflowError names the first missing
    one with the way to make it again (jobs after a block job list its record, not its files)."""
    for path in paths:
        if not os.path.exists(path):
            raise SharflowError(
                f"{path} is missing, though the job that makes it finished: it was deleted since. "
                f"Make it (with the other shards of its job) again by naming it: snakemake {path}"
            )


def block_outputs(
    job_files, job_file: str, block: str, shards_per_job: int, count: int | None = None
) -> dict[str, str]:
    """The outputs of a job over a block: each member shard's files (job_files(shard key).named()),
    named <name>_<m> for member m, and `job`, the job's completion record (written last)."""
    out = {}
    for m, shard in enumerate(block_members(block, shards_per_job, count)):
        out.update({f"{name}_{m}": path for name, path in job_files(shard).named().items()})
    return {**out, "job": job_file}


def part_key(part: int | str) -> str:
    """A context part's file key: 4 digits (0003); a wildcard pattern such as "{part}" stays as it is."""
    return part if isinstance(part, str) else f"{part:04d}"


def generations(plan: dict) -> list[dict]:
    """The generations of a shard plan ({first, shards, records}: sharflow.shar.plan); a plan made
    before generations were kept is one from shard 0."""
    return plan.get("generations") or [
        {"first": 0, "shards": plan["num_shards"], "records": plan.get("records")}
    ]


def shard_numbers(plan: dict) -> list[int]:
    """Every shard number a plan has, in order (a generation after the first starts at a multiple of
    10, so the numbers between two generations are unused)."""
    return [g["first"] + k for g in generations(plan) for k in range(g["shards"])]


def planned_shards(plan_path: str) -> list[int]:
    """shard_numbers of the plan file."""
    return shard_numbers(read_json(plan_path))
