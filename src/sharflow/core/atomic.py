"""Files and folders that appear under their final name only when complete; the stages' JSON files."""

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temp file path beside `path`, for writers that want a file name (np.lib.format.open_memmap).

    Renamed to `path` only if the block succeeds; removed otherwise.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; results are ordinary files
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temp file beside `path`; rename it to `path` only if the block succeeds."""
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f


def write_json(path: str | os.PathLike, value, *, sort_keys: bool = False) -> None:
    """`value` as JSON at `path` (indent 1, a final newline), atomically: every stats, plan and spec file."""
    with atomic_file(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=sort_keys)
        f.write("\n")


def read_json(path: str | os.PathLike):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp folder beside `path`; it replaces `path` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
