"""The object cache's bound: whole copies of objects on one node's disk, at most a set size of them,
least recently used first out, never one a job holds.

sharflow.io.storage copies a loose object (an audio file, a manifest) whole into the cache the
first time a process reads it; containers are read by range and never copied (sharflow.core.
containers). The cache is `$SHARFLOW_OBJECT_CACHE` (else `objects/` in sharflow's cache) and holds at
most `$SHARFLOW_OBJECT_CACHE_SIZE` bytes (`20G`, `500M`, a number of bytes; DEFAULT_BOUND when unset).

- **Held files stay.** A reader holds a copy while it reads it: a shared `flock` on the open copy
  (`hold`). Eviction takes an exclusive lock without waiting and skips any file it cannot lock, so a
  file a running job holds is never removed; a reader that opened a copy just as it was evicted sees
  that the name no longer leads to its file and fetches the object again (`hold` says so).
- **The bound counts what will be there.** Before a download its bytes are reserved in the ledger
  (`.ledger.json`, under the cache-wide lock `.lock`, which keeps a running count of the bytes); when
  the reservation does not fit, the cache is walked for its true bytes and the least recently used
  copies (by mtime: every hit touches its copy) are evicted down to LOW_WATER of the bound. The copy
  is written under a temp name beside its final one and renamed when complete (jobs never see a
  partial file). The ledger
  keeps the peak it has reserved, which the tests and bench_storage compare to the bound: it counts
  file bytes (what `ls` sums), not the file system's blocks (up to one block more per file).
- **Too big or all held.** An object larger than the bound is an error that says which variable to
  raise; when every copy is held and no room can be made, the download waits (HELD_WAIT_S) for a
  reader to finish, then fails naming the bound.
"""

import fcntl
import json
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from sharflow.core.errors import SharflowError

DEFAULT_BOUND = 20 << 30  # 20 GiB: a compute node's scratch holds it; see docs/pages/object-storage.md
LEDGER, LOCK, PART = ".ledger.json", ".lock", ".part-"
STALE_PART_S = 3600  # a partial download this old was left by a killed process: removed by eviction
HELD_WAIT_S = 300
LOW_WATER = 0.9  # an eviction makes room down to this share of the bound
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class CacheFull(SharflowError):
    """The object cache cannot make room for an object: names the bound and what to do."""


def parse_size(text: str) -> int:
    """Bytes of `20G`, `512M`, `1.5T`, `1000000` (binary units; a trailing `B` or `iB` allowed)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise SharflowError(
            f"SHARFLOW_OBJECT_CACHE_SIZE={text!r}: give a size such as 20G, 500M or a number of bytes"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def bound() -> int:
    """The cache's bound in bytes: $SHARFLOW_OBJECT_CACHE_SIZE, else DEFAULT_BOUND."""
    value = os.environ.get("SHARFLOW_OBJECT_CACHE_SIZE")
    return parse_size(value) if value else DEFAULT_BOUND


@contextmanager
def _locked(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _ledger(root: Path) -> dict:
    """{reserved: {part: bytes}, peak, bytes}: `bytes` the cache's files and promises as the ledger
    counts them (None where it has not counted yet: the next reservation walks the cache)."""
    try:
        value = json.loads((root / LEDGER).read_text())
        if isinstance(value, dict):
            known = value.get("bytes")
            return {
                "reserved": dict(value.get("reserved", {})),
                "peak": int(value.get("peak", 0)),
                "bytes": int(known) if known is not None else None,
            }
    except (OSError, ValueError, TypeError):
        pass
    return {"reserved": {}, "peak": 0, "bytes": None}


def _write_ledger(root: Path, ledger: dict) -> None:
    tmp = root / f"{LEDGER}.{os.getpid()}"
    tmp.write_text(json.dumps(ledger, sort_keys=True))
    os.replace(tmp, root / LEDGER)


def _copies(root: Path) -> list[tuple[int, int, Path]]:
    """(mtime ns, bytes, path) of every copy and partial download in the cache."""
    out = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name in (LEDGER, LOCK) or name.startswith(LEDGER):
                continue
            path = Path(folder) / name
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime_ns, st.st_size, path))
    return out


def _evict(root: Path, ledger: dict, need: int, limit: int) -> int:
    """Walk the cache for its true bytes (its files, and what each download still has to write), then
    remove least recently used copies no one holds until `need` more bytes fit under LOW_WATER of the
    bound (a walk comes once per tenth of the bound fetched, not once per download); bytes in use after."""
    files = _copies(root)
    sizes = {str(p): n for _, n, p in files}
    ledger["reserved"] = {p: n for p, n in ledger["reserved"].items() if p in sizes}
    used = sum(sizes.values()) + sum(max(0, n - sizes[p]) for p, n in ledger["reserved"].items())
    low = max(int(limit * LOW_WATER), need)
    now = time.time_ns()
    for mtime, n, path in sorted(files):
        if used + need <= low:
            break
        if path.name.startswith(PART):
            if now - mtime < STALE_PART_S * 10**9:
                continue  # a download under way
            path.unlink(missing_ok=True)  # a killed process's partial download
            n = max(n, ledger["reserved"].pop(str(path), 0))
        elif not _try_remove(path):
            continue  # held by a reader
        used -= n
    return used


def _try_remove(path: Path) -> bool:
    """Remove a copy unless a reader holds it (an exclusive lock, not waited for)."""
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return True
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        path.unlink(missing_ok=True)
        return True


def reserve(root: Path, part: Path, size: int) -> None:
    """Make room for a download of `size` bytes into `part` (evicting), and promise it the room."""
    limit = bound()
    if size > limit:
        raise CacheFull(
            f"an object of {size:,} bytes is larger than the object cache's bound ({limit:,} bytes): "
            "raise SHARFLOW_OBJECT_CACHE_SIZE (docs: object storage, sizing the cache)"
        )
    deadline = time.monotonic() + HELD_WAIT_S
    while True:
        with _locked(root):
            ledger = _ledger(root)
            used = ledger["bytes"]
            if used is None or used + size > limit:
                used = _evict(root, ledger, size, limit)
            if used + size <= limit:
                ledger["reserved"][str(part)] = size
                ledger["bytes"] = used + size
                ledger["peak"] = max(ledger["peak"], used + size)
                _write_ledger(root, ledger)
                return
        if time.monotonic() > deadline:
            raise CacheFull(
                f"the object cache ({root}) is full of copies that running jobs hold: {used:,} of "
                f"{limit:,} bytes, and {size:,} more are needed. Raise SHARFLOW_OBJECT_CACHE_SIZE or run "
                "fewer jobs per node"
            )
        time.sleep(0.5)


def settle(root: Path, part: Path, kept: bool = True) -> None:
    """The download into `part` is over: renamed into place (`kept`: its bytes now count as the
    copy's), or failed (its promise is given back)."""
    with _locked(root):
        ledger = _ledger(root)
        promised = ledger["reserved"].pop(str(part), 0)
        if not kept and ledger["bytes"] is not None:
            ledger["bytes"] = max(0, ledger["bytes"] - promised)
        _write_ledger(root, ledger)


def peak(root: Path) -> int:
    """The most bytes the cache at `root` has held or promised at once (since its ledger began)."""
    return _ledger(root)["peak"]


def hold(path: Path):
    """The copy at `path` opened for reading under a shared lock (it stays until the file is closed),
    and touched (recently used); None when it is not there or was evicted as it was opened."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (the caller closes it)
    except FileNotFoundError:
        return None
    fcntl.flock(f, fcntl.LOCK_SH)
    try:
        if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
            raise FileNotFoundError
        os.utime(path)
    except FileNotFoundError:  # evicted between the open and the lock
        f.close()
        return None
    return f
