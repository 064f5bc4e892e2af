"""A shard job that resumes where it was killed: the shards it finished are kept, not made again.

Snakemake deletes a job's declared outputs before it runs it, so a pre-empted block job would start
over. Instead, each shard the job finishes is also hard-linked into the job's `.finished` folder
beside its record (the same inodes: nothing is copied), with a mark written last; the folder also
holds the key of what the job was given (its inputs' sizes and times, its settings). A rerun with
the same key links those shards back under their names, untouched (same inode, same bytes), and
makes only the rest; a rerun with another key (new inputs or settings) starts afresh. The folder is
removed once the job's record is written.

Example::

    with ResumableJob(record, key=job_key(inputs, params)) as resume:
        for shard, files in shards:
            if not resume.restore(shard, files):
                make(shard, files)
                resume.keep(shard, files)
        write_job_record(record, ...)
"""

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from sharflow.core.atomic import write_json

log = logging.getLogger(__name__)

KEY = "key.json"


def job_key(inputs: Iterable[str], settings) -> str:
    """What a job's outputs depend on: its input files (path, size, modification time) and settings."""
    state = [(str(p), *_stamp(p)) for p in sorted(map(str, inputs))]
    text = json.dumps([state, settings], sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


class ResumableJob:
    """The `.finished` folder of the job whose record is `record` (see the module docstring)."""

    def __init__(self, record: str, key: str):
        record = Path(record)
        self.folder = record.parent / f".{record.stem}.finished"
        self.key = key
        self.restored: list[str] = []

    def __enter__(self) -> "ResumableJob":
        stored = self.folder / KEY
        if self.folder.exists() and (not stored.exists() or json.loads(stored.read_text()) != self.key):
            log.info("resume: %s holds another run's shards (other inputs or settings): unused", self.folder)
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(stored, self.key)
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is None:  # the job finished: its record is written, nothing is left to resume
            shutil.rmtree(self.folder, ignore_errors=True)
            if self.restored:
                log.info(
                    "resume: %d shard(s) a killed run finished were kept: %s",
                    len(self.restored),
                    ", ".join(self.restored),
                )

    def _staged(self, shard: str, i: int, path: str) -> Path:
        return self.folder / shard / f"{i}.{Path(path).name}"  # (two fields' files may share a name)

    def restore(self, shard: str, files: list[str]) -> bool:
        """Put a shard a killed run of this job finished back under its names (hard links: same inodes,
        untouched bytes); False if this job has not finished it."""
        if not (self.folder / f"{shard}.done").exists():
            return False
        for i, path in enumerate(files):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).unlink(missing_ok=True)
            os.link(self._staged(shard, i, path), path)
        self.restored.append(shard)
        return True

    def keep(self, shard: str, files: list[str]) -> None:
        """Record a shard this job has finished: its files hard-linked here, then its mark."""
        (self.folder / shard).mkdir(exist_ok=True)
        for i, path in enumerate(files):
            staged = self._staged(shard, i, path)
            staged.unlink(missing_ok=True)
            os.link(path, staged)
        (self.folder / f"{shard}.done").touch()
