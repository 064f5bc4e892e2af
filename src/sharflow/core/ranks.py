"""Ranks inside one job: one process per visible GPU, or N CPU processes with one torch thread each.

Units of work are bin-packed onto ranks beforehand (sharflow.core.balance); each rank runs the same
function over its own units and returns a result. With one torch thread per CPU rank and work
split along fixed unit boundaries, outputs do not depend on the number of ranks.
"""

import glob
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from sharflow.core.errors import SharflowError

log = logging.getLogger(__name__)


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


def _init_rank(device: str) -> None:
    import torch

    torch.set_num_threads(1)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)


def _call(fn: Callable, rank: int, device: str, args: tuple):
    _init_rank(device)
    return fn(rank, device, *args)


def run_ranks(fn: Callable, devices: list[str], args_per_rank: list[tuple]) -> list:
    """Run fn(rank, device, *args) for each rank and return the results in rank order.

    Rank 0 runs in this process (already started, its imports warm); ranks 1.. run in spawned
    processes at the same time. `fn` must be importable (a module-level function). An exception
    in any rank is re-raised here.
    """
    if len(devices) == 1:
        return [_call(fn, 0, devices[0], args_per_rank[0])]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(devices) - 1, mp_context=ctx) as pool:
        futures = [pool.submit(_call, fn, r, devices[r], args_per_rank[r]) for r in range(1, len(devices))]
        first = _call(fn, 0, devices[0], args_per_rank[0])
        return [first] + [f.result() for f in futures]
