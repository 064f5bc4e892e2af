"""Logging for workflow jobs: everything to the job's log file, people's errors without tracebacks."""

import logging
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sharflow.core.errors import SharflowError

log = logging.getLogger("sharflow")


@contextmanager
def job_log(path: str) -> Iterator[None]:
    """Send stderr (tqdm, C libraries and spawned rank processes included) and logging to `path`.

    The redirection is at the file-descriptor level, so processes started inside the block
    write to the log too. A SharflowError is written to the log and to the job's original stderr
    as one readable message and ends the job with exit status 1; any other exception is logged
    with its traceback and re-raised.
    """
    console = sys.stderr
    console_fd = os.dup(2)
    start = time.perf_counter()
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
                seconds_since_process_start(),
            )
            yield
            log.info("%s", job_footprint(start))
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
