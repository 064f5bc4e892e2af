"""Logging for workflow jobs: everything to the job's log file, people's errors without tracebacks."""

import logging
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sharflow.core.atomic import write_json
from sharflow.core.errors import SharflowError

log = logging.getLogger("sharflow")
COST_SUFFIX = ".cost.json"  # beside a job's log: what the job cost (job_cost), read by sharflow.plan
_LOADS: dict[str, float] = {}  # seconds spent loading each model in this process (model_load)


@contextmanager
def model_load(what: str) -> Iterator[None]:
    """Time a model's load: a fixed cost per job, which the job's cost record keeps apart (job_cost)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        _LOADS[what] = _LOADS.get(what, 0.0) + time.perf_counter() - start


def cost_path(log_path: str) -> str:
    """The cost record of the job whose log is `log_path` (x.log: x.cost.json)."""
    return (log_path[: -len(".log")] if log_path.endswith(".log") else log_path) + COST_SUFFIX


@contextmanager
def job_log(path: str) -> Iterator[None]:
    """Send stderr (tqdm, C libraries and spawned rank processes included) and logging to `path`.

    The redirection is at the file-descriptor level, so processes started inside the block
    write to the log too. A SharflowError is written to the log and to the job's original stderr
    as one readable message and ends the job with exit status 1; any other exception is logged
    with its traceback and re-raised. A job that finishes writes its cost record beside the log
    (job_cost: `x.log` gives `x.cost.json`), which the cost plan reads (sharflow.plan).
    """
    console = sys.stderr
    console_fd = os.dup(2)
    start = time.perf_counter()
    startup = seconds_since_process_start()
    startup_cpu = _cpu_seconds(resource.getrusage(resource.RUSAGE_SELF))
    _LOADS.clear()
    with open(path, "w", encoding="utf-8", buffering=1) as f:
        sys.stderr.flush()
        os.dup2(f.fileno(), 2)
        sys.stderr = f
        logging.basicConfig(
            stream=f, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
        )
        try:
            log.info(
                "job started %.2f s after its process (interpreter, Snakemake's script preamble, imports)",
                startup,
            )
            yield
            log.info("%s", job_footprint(start))
            write_json(cost_path(path), job_cost(start, startup, startup_cpu))
        except SharflowError as e:
            log.error("%s", e)
            os.write(console_fd, f"sharflow: error: {e}\n(see {path})\n".encode())
            raise SystemExit(1) from None
        except Exception:
            log.exception("unexpected error")  # the traceback goes to the log, not only the console
            raise
        finally:
            f.flush()
            os.dup2(console_fd, 2)
            os.close(console_fd)
            sys.stderr = console


def seconds_since_process_start() -> float:
    """How long this process has run, from /proc (0.0 where there is no /proc)."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as f:
            started_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started_ticks / os.sysconf("SC_CLK_TCK"))


def job_footprint(start: float) -> str:
    """Wall time and exact peak memory of this process and of its finished worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    wall = time.perf_counter() - start
    return f"job done in {wall:.1f} s: peak RSS {own:.0f} MB, largest worker process {workers:.0f} MB"


def _cpu_seconds(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def job_cost(start: float, startup: float, startup_cpu: float = 0.0) -> dict:
    """What this job cost, for the cost plan (sharflow.plan): wall seconds from `start` and the
    `startup` before it (and its CPU seconds, `startup_cpu`), CPU seconds of this process and its
    finished workers, their peak RSS, the seconds each model took to load (the framework's import
    included), and the peak GPU memory torch allocated (0 without CUDA)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    gpu_mb = 0.0
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        gpu_mb = max(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())) / 2**20
    return {
        "startup_s": round(startup, 3),
        "startup_cpu_s": round(startup_cpu, 3),
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(_cpu_seconds(own) + _cpu_seconds(workers), 3),
        "peak_rss_mb": round(max(own.ru_maxrss, workers.ru_maxrss) / 1024, 1),
        "gpu_peak_mb": round(gpu_mb, 1),
        "model_load_s": {k: round(v, 3) for k, v in sorted(_LOADS.items())},
    }
