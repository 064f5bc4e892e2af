"""Ranks inside one job: one process per visible GPU, or N CPU processes with one torch thread each.

The one way a model job (quality part, context part, codes shard) runs its work: `rank_job`
resolves and logs the devices, bin-packs the job's units onto the ranks by cost
(sharflow.work.balance), runs the same function on every rank and gives back each rank's result
with its units and planned cost. With one torch thread per CPU rank and work split along fixed unit
boundaries, outputs do not depend on the number of ranks.
"""

import glob
import logging
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharflow.core.errors import SharflowError
from sharflow.work.balance import loads, lpt_assign
from sharflow.work.parallel import resolve_workers

log = logging.getLogger(__name__)

# The audio seconds of work that a CPU rank beyond the first must have to be started in a job fitted to
# its work (a stage's `workers: 0`, all cores: sharflow.workflow.run.Run.fits_work), unless the stage
# says otherwise: a spawned rank imports torch and loads its models before it measures a second (a few
# CPU-seconds), which a share of the demo's parts (a minute or two of audio) would not pay back
CPU_RANK_SECONDS = 120.0


def rank_devices(device: str, cpu_workers: int) -> list[str]:
    """Devices of the ranks: `cuda:i` for each visible GPU (device auto|cuda), else `cpu` × workers."""
    import torch

    if device not in ("auto", "cpu", "cuda"):
        raise SharflowError(f"device must be auto, cpu or cuda, got {device!r}")
    if device != "cpu" and torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if device == "cuda":
        raise SharflowError(
            "device: cuda was asked for but torch sees no GPU (CUDA_VISIBLE_DEVICES="
            f"{_visible()}); request GPUs for the job or set device: auto"
        )
    return ["cpu"] * max(1, cpu_workers)


def job_devices(device: str, cpu_workers: int, gpus: int = 0, what: str = "job") -> list[str]:
    """rank_devices, logged with what the job was granted; fails fast on fewer GPUs than the job asked for.

    `gpus` is the job's `gpu` resource (what it asked the scheduler for). Under Slurm (SLURM_JOB_ID
    set) seeing fewer is an error: a known pitfall of multi-GPU requests through the Slurm
    plugin is a job that starts with one GPU, or none, and silently runs slower. Outside Slurm the
    `gpu` resource only caps how many GPU jobs run at once, so no GPU means CPU ranks, with a warning.
    """
    devices = rank_devices(device, cpu_workers)
    cuda = [d for d in devices if d.startswith("cuda")]
    granted = {
        k: os.environ[k] for k in ("SLURM_JOB_ID", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE") if k in os.environ
    }
    log.info(
        "%s: device %s, asked for %d GPU(s), sees %s (CUDA_VISIBLE_DEVICES=%s%s)",
        what,
        device,
        gpus,
        cuda or "no GPU",
        _visible(),
        "".join(f", {k}={v}" for k, v in granted.items()),
    )
    if gpus and len(cuda) < gpus and (cuda or "SLURM_JOB_ID" in os.environ):
        raise SharflowError(
            f"{what} asked for {gpus} GPU(s) but sees {len(cuda)} "
            f"(CUDA_VISIBLE_DEVICES={_visible()}); check the "
            "rule's `gpu` resource in the profile and the partition's GRES, or set device: cpu"
        )
    if gpus and not cuda:
        log.warning("%s: no GPU visible: running on %d CPU process(es)", what, len(devices))
    return devices


def host_shows_gpu() -> bool:
    """Whether this process could see an NVIDIA GPU, from the device nodes alone (no torch import).

    False when CUDA_VISIBLE_DEVICES hides every device ("" or "-1") or no /dev/nvidia<N> exists.
    Cheap enough for Snakefile parse time; a job still asks torch which GPUs it really has.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def _visible() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


@dataclass(frozen=True)
class Rank:
    """One rank of a job: its number, its device, and the job's scratch folder (None: no scratch)."""

    index: int
    device: str
    scratch: str | None = None

    def file(self, suffix: str) -> str:
        """This rank's scratch file `r<index><suffix>`, removed with the folder when the job ends."""
        if self.scratch is None:
            raise ValueError("this rank job has no scratch folder (rank_job(..., scratch_beside=...))")
        return f"{self.scratch}/r{self.index}{suffix}"


@dataclass(frozen=True)
class RankResult:
    """What one rank did: its units (the keys bin-packed onto it, sorted), their cost, its return value."""

    rank: Rank
    units: list
    planned_cost: float
    value: Any


def _init_rank(device: str) -> None:
    import torch

    if not logging.getLogger().handlers:  # a spawned rank: its stderr is the job's log (core.logs.job_log)
        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
        )
    torch.set_num_threads(1)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
        # the same bytes from run to run: cuDNN's deterministic algorithms, none chosen by timing them
        # (its cost on a GPU not yet measured: bench_quality and bench_codes time the ranks with it)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def _call(fn: Callable, rank: Rank, args: tuple):
    _init_rank(rank.device)
    return fn(rank, *args)


def run_ranks(fn: Callable, ranks: list[Rank], args_per_rank: list[tuple]) -> list:
    """Run fn(rank, *args) for each rank and return the results in rank order.

    Rank 0 runs in this process (already started, its imports and loaded models warm); ranks 1..
    run in spawned processes at the same time. `fn` must be importable (a module-level function).
    An exception in any rank is re-raised here.
    """
    if len(ranks) == 1:
        return [_call(fn, ranks[0], args_per_rank[0])]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(ranks) - 1, mp_context=ctx) as pool:
        futures = [pool.submit(_call, fn, ranks[r], args_per_rank[r]) for r in range(1, len(ranks))]
        first = _call(fn, ranks[0], args_per_rank[0])
        return [first] + [f.result() for f in futures]


@dataclass(frozen=True)
class RankJob:
    """The ranks of one job (see rank_job)."""

    what: str
    devices: list[str]
    scratch: str | None

    def run(
        self,
        fn: Callable,
        costs: Mapping[Hashable, float],
        unit: Callable[[Hashable], Any] | None = None,
        args: tuple = (),
    ) -> list[RankResult]:
        """Bin-pack the units (the keys of `costs`) onto the ranks and run fn(rank, units, *args) on each.

        A rank gets its keys in sorted order, each mapped through `unit` when given (e.g. a key to
        what the rank reads); results come back in rank order.
        """
        assignment = lpt_assign(costs, len(self.devices))
        ranks = [Rank(i, device, self.scratch) for i, device in enumerate(self.devices)]
        work = [([unit(k) for k in keys] if unit else list(keys), *args) for keys in assignment]
        values = run_ranks(fn, ranks, work)
        return [
            RankResult(rank, keys, loads([keys], costs)[0], value)
            for rank, keys, value in zip(ranks, assignment, values, strict=True)
        ]


def cpu_ranks_for(workers: int, seconds: float | None, per_rank: float = CPU_RANK_SECONDS) -> int:
    """CPU ranks for `workers` (0: every core this process may use); for a job fitted to its work,
    `seconds` of audio, one per `per_rank` seconds of it, at least one and at most `workers`."""
    cores = resolve_workers(workers)
    if seconds is None:
        return cores
    return max(1, min(cores, math.ceil(seconds / per_rank)))


@contextmanager
def rank_job(
    what: str,
    *,
    device: str,
    workers: int,
    gpus: int = 0,
    scratch_beside: str | None = None,
    seconds: float | None = None,
    rank_seconds: float = CPU_RANK_SECONDS,
) -> Iterator[RankJob]:
    """The ranks of a model job: job_devices (logged, checked against the `gpu` grant), and a scratch
    folder beside the file `scratch_beside` (removed when the block ends, and at the start of a rerun
    when a killed run left it) for the ranks' own files. Without a GPU, a job given the `seconds` of
    audio it holds starts no more CPU ranks than that work pays for (cpu_ranks_for: a rank per
    `rank_seconds` of it).

    Example::

        with rank_job("quality part 3", device="auto", workers=2, scratch_beside=out_metrics) as job:
            results = job.run(measure_records, {line: seconds}, unit=lambda line: (line, offsets[line]))
            merged = merge_by_line([r.rank.file(".jsonl") for r in results])
    """
    devices = job_devices(device, cpu_ranks_for(workers, seconds, rank_seconds), gpus, what)
    if scratch_beside is None:
        yield RankJob(what, devices, None)
        return
    folder = Path(scratch_beside).parent
    folder.mkdir(parents=True, exist_ok=True)
    prefix = f".ranks.{Path(scratch_beside).name}."  # this job's: another job may share the folder
    for stale in folder.glob(f"{prefix}*"):  # left by a killed run of this job
        shutil.rmtree(stale, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=prefix, dir=folder) as tmp:
        yield RankJob(what, devices, tmp)
