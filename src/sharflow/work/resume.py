"""Shard jobs that keep what they made: a shard is made again only when what it is made of changed.

Snakemake deletes a job's declared outputs before it runs it, so a block job run again (killed and
resumed, or one of its shards' records corrected) would start over. Instead, each shard the job
finishes is also hard-linked into the job's `.kept` folder beside its record (the same inodes:
nothing is copied, no byte of disk is spent while the shard's files are there), with a mark written
last: the shard's **key** (what its files are made of: its records and the job's settings, for a
codes shard the audio it encodes and the codec), any **part keys** (what a part of its files is made
of, the audio alone for a shar shard) and each file's size and digest. The folder stays after the
job: it is what a later run of the job keeps.

A run of the job puts back, for each shard whose key is the same, its files under their names,
untouched (same inode, same bytes): the shards a killed run finished, and the shards of a block that
runs again because another of its shards changed. A shard whose part key is the same can have that
part put back and make the rest (a corrected transcript: the shard's cuts file is written again,
its audio kept). A kept file whose bytes are no longer those it was kept with (damaged in place:
both names are one inode) is never put back: its size and digest are checked first (1.3 s a GB on a
2-core test machine). Once the job is done, the folder holds its own shards alone, as this run made
or put them back.

To make a job's shards afresh whatever their keys, remove its `.kept` folder and its record (docs:
long runs).

Example::

    with ResumableJob(record, [shard for shard, _ in shards]) as resume:
        for shard, files in shards:
            key = content_key(records_of(shard), settings)
            if not resume.restore(shard, files, key):
                make(shard, files)
                resume.keep(shard, files, key)
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

KEPT = ".kept"
MARK = ".json"


def content_key(*parts) -> str:
    """A 16-byte hex key of JSON-able `parts` (dicts by value, in any key order; bytes as text)."""
    text = json.dumps(parts, sort_keys=True, default=_text)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _text(value) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def kept_folder(record: str | os.PathLike) -> Path:
    """The `.kept` folder of the job whose record is `record`: .<record stem>.kept beside it."""
    record = Path(record)
    return record.parent / f".{record.stem}{KEPT}"


class ResumableJob:
    """The `.kept` folder of the job whose record is `record` and whose shards are `shards` (keys):
    see the module docstring. Ranks in other processes may keep shards through a copy of it."""

    def __init__(self, record: str | os.PathLike, shards: Iterable[str]):
        self.folder = kept_folder(record)
        self.shards = set(shards)
        self.restored: list[str] = []
        self.partly: list[str] = []
        self._marks: dict[str, dict | None] = {}

    def __enter__(self) -> "ResumableJob":
        self.folder.mkdir(parents=True, exist_ok=True)
        old = self.folder.with_name(self.folder.name[: -len(KEPT)] + ".finished")
        shutil.rmtree(old, ignore_errors=True)  # sharflow before 2026-11 kept a killed job's shards there
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None:  # killed or failed: everything kept stays for the next run
            return
        for entry in list(self.folder.iterdir()) if self.folder.exists() else []:
            shard = entry.name[: -len(MARK)] if entry.name.endswith(MARK) else entry.name
            if shard not in self.shards:  # not this job's
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink(missing_ok=True)
        if self.restored:
            log.info(
                "kept: %d shard(s) made before were put back: %s", len(self.restored), _span(self.restored)
            )
        if self.partly:
            log.info(
                "kept: %d shard(s) kept their audio and were written again: %s",
                len(self.partly),
                _span(self.partly),
            )

    def kept_path(self, shard: str, i: int, path: str) -> Path:
        """Where the shard's file `path` (its i-th) is kept."""
        return self.folder / shard / f"{i}.{Path(path).name}"  # (two fields' files may share a name)

    def mark(self, shard: str) -> dict | None:
        """The shard's mark ({key, parts, files: {name: [size, digest]}}) if it was kept and its files
        are all there with the bytes they were kept with; else None."""
        if shard not in self._marks:
            self._marks[shard] = self._read_mark(shard)
        return self._marks[shard]

    def _read_mark(self, shard: str) -> dict | None:
        try:
            mark = json.loads((self.folder / f"{shard}{MARK}").read_text())
        except (FileNotFoundError, ValueError):
            return None
        for name, (size, digest) in mark["files"].items():
            path = self.folder / shard / name
            try:
                if path.stat().st_size != size or file_digest(path) != digest:
                    return None
            except FileNotFoundError:
                return None
        return mark

    def restore(self, shard: str, files: list[str], key: str | None) -> bool:
        """Put the shard's files back under their names (hard links: same inodes, untouched bytes) if it
        was kept with `key`; False (nothing done) otherwise, or if `key` is None (not known)."""
        mark = self.mark(shard)
        if key is None or mark is None or mark["key"] != key:
            return False
        self._link_back(shard, files, range(len(files)))
        self.restored.append(shard)
        return True

    def restore_part(self, shard: str, files: list[str], which: Iterable[int], part: str, key: str) -> bool:
        """Put back files[i] for i in `which` if the shard was kept with part key `part` == `key`;
        False (nothing done) otherwise. The caller makes the rest and keeps the shard."""
        mark = self.mark(shard)
        if mark is None or mark["parts"].get(part) != key:
            return False
        self._link_back(shard, files, which)
        self.partly.append(shard)
        return True

    def _link_back(self, shard: str, files: list[str], which: Iterable[int]) -> None:
        for i in which:
            path = files[i]
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).unlink(missing_ok=True)
            os.link(self.kept_path(shard, i, path), path)

    def keep(self, shard: str, files: list[str], key: str | None, **parts: str) -> None:
        """Record a shard this job has made: its files hard-linked here, then its mark."""
        (self.folder / f"{shard}{MARK}").unlink(missing_ok=True)  # no mark while the links change
        staged = self.folder / shard
        if staged.exists():
            shutil.rmtree(staged)
        staged.mkdir()
        kept = {}
        for i, path in enumerate(files):
            link = self.kept_path(shard, i, path)
            os.link(path, link)
            kept[link.name] = [os.stat(link).st_size, file_digest(link)]
        write_json(self.folder / f"{shard}{MARK}", {"key": key, "parts": parts, "files": kept})
        self._marks.pop(shard, None)


def file_digest(path: str | os.PathLike) -> str:
    """A 16-byte BLAKE2b digest of a file's bytes: what a kept shard costs to keep and to put back
    (1.3 s a GB on a 2-core test machine, against minutes to make it)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def _span(shards: list[str]) -> str:
    return ", ".join(shards) if len(shards) <= 10 else f"{', '.join(shards[:10])} ..."
