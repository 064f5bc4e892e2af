"""Caches that outlive a run: one root, keys that name what an entry depends on, one build at a time.

An entry (the text normalizer's compiled grammars, for one) is a folder under
`<root>/<kind>/<key>/`, where the key names everything the entry depends on: the versions of the
packages that build it and the options it was built with. An entry is built into a temp folder
beside it and renamed into place when complete, under an exclusive lock on `<key>.lock`, so two
jobs (two datasets of one language, two runs sharing a cache) never build it twice at once and a
killed build never leaves a half entry under its final name. The root is `cache_dir` from the
config, else $SHARFLOW_CACHE_DIR, else $XDG_CACHE_HOME/sharflow, else ~/.cache/sharflow: never
inside results/, so `rm -rf results` does not pay the build again.

Example::

    key = cache_key("en", input_case="cased", versions=package_versions("pynini"))
    folder = cached_build(cache_root(None), "normalizers", key, build=lambda tmp: make_grammars(tmp))
"""

import fcntl
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sharflow.core.atomic import write_json

log = logging.getLogger(__name__)

DONE = "entry.json"  # written last into an entry: what it is and how long it took to build


def cache_root(configured: str | None = None) -> Path:
    """Where sharflow's caches live: `configured`, else $SHARFLOW_CACHE_DIR, else the user's cache."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get("SHARFLOW_CACHE_DIR"):
        return Path(os.environ["SHARFLOW_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sharflow"


def package_versions(*packages: str) -> dict[str, str]:
    """{package: installed version} ("absent" for one not installed), without importing them."""
    out = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def file_identity(value):
    """`value` as a key holds it: a string that names a file (a model, weights) as [name, size, mtime
    in ns], so that a file replaced under its name changes the key; anything else as it is."""
    if isinstance(value, str) and os.path.isfile(value):
        st = os.stat(value)
        return [value, st.st_size, st.st_mtime_ns]
    return value


def cache_key(name: str, **parts) -> str:
    """A folder name for an entry: `name`, then a digest of every part (versions, options), e.g.
    en-3f09a1c2e4b5. The parts are written beside the entry (entry.json), so the key stays short."""
    text = json.dumps(parts, sort_keys=True, default=str)
    digest = hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{digest}"


def cached_build(
    root: Path, kind: str, key: str, build: Callable[[Path], None], describe: dict | None = None
) -> Path:
    """The entry folder <root>/<kind>/<key>, built by `build(temp folder)` first if it is not there.

    Only one process builds an entry: the others wait on its lock and then find it built. A build
    that fails or is killed leaves no entry (its temp folder is removed, or left under a `.tmp` name
    the next build clears). `describe` (what the key stands for) is written into the entry.
    """
    folder = root / kind / key
    if (folder / DONE).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{key}.lock", "w") as lock:
        waited = time.perf_counter()
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / DONE).is_file():
            log.info("cache %s/%s: built by another job meanwhile (waited %.1f s)", kind, key, _since(waited))
            return folder
        _clear_stale(folder)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=folder.parent))
        try:
            start = time.perf_counter()
            build(tmp)
            write_json(tmp / DONE, {"key": key, **(describe or {}), "build_seconds": round(_since(start), 1)})
            os.replace(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        log.info("cache %s/%s: built in %.1f s at %s", kind, key, _since(start), folder)
    return folder


def _clear_stale(folder: Path) -> None:
    """Remove what a killed build left: an entry without its DONE file, temp folders of the key."""
    if folder.exists():
        shutil.rmtree(folder)
    for stale in folder.parent.glob(f".{folder.name}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def _since(start: float) -> float:
    return time.perf_counter() - start
