"""Logging for workflow jobs: everything to the job's log file, people's errors without tracebacks."""

import logging
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sharflow.errors import SharflowError

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


def job_footprint(start: float) -> str:
    """Wall time and exact peak memory of this process and of its finished worker processes."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    wall = time.perf_counter() - start
    return f"job done in {wall:.1f} s: peak RSS {own:.0f} MB, largest worker process {workers:.0f} MB"
