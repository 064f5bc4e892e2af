"""Logging for workflow jobs: everything to the job's log file, people's errors without tracebacks."""

import logging
import os
import sys
from contextlib import contextmanager
from typing import Iterator

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
    with open(path, "w", encoding="utf-8", buffering=1) as f:
        sys.stderr.flush()
        os.dup2(f.fileno(), 2)
        sys.stderr = f
        logging.basicConfig(
            stream=f, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
        )
        try:
            yield
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
