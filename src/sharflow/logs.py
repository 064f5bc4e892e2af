"""Logging for workflow jobs: everything to the job's log file, people's errors without tracebacks."""

import logging
import sys
from contextlib import contextmanager
from typing import Iterator

from sharflow.errors import SharflowError

log = logging.getLogger("sharflow")


@contextmanager
def job_log(path: str) -> Iterator[None]:
    """Send stderr (tqdm included) and logging of the block to `path`.

    A SharflowError is written to the log and to the job's original stderr as one readable
    message and ends the job with exit status 1; any other exception keeps its traceback.
    """
    console = sys.stderr
    with open(path, "w", encoding="utf-8", buffering=1) as f:
        sys.stderr = f
        logging.basicConfig(
            stream=f, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", force=True
        )
        try:
            yield
        except SharflowError as e:
            log.error("%s", e)
            print(f"sharflow: error: {e}\n(see {path})", file=console)
            raise SystemExit(1) from None
        finally:
            sys.stderr = console
