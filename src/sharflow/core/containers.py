"""Audio where it lies: a record's audio as a member of a tar (WebDataset shards) or a row of a
Parquet file (the Hub's Audio feature), read in place.

A record's `audio_filepath` may address a member inside a container, `<container>.tar#<member>` or
`<container>.parquet#<row>` (the URL fragment's meaning: a part inside), the container a path under
the audio root or an object under an `s3://` root. Every stage opens audio through this module
(`open_audio`, `size`, `stamp`, `exists`), which hands a plain file or object to sharflow.core.storage
and a member to its bytes inside the container, so nothing is extracted and a member's bytes are read
only when its audio is.

A tar member is read whole up to WHOLE_MEMBER_BYTES, else through a window over the tar. A tar's
member index (name -> data offset and size, from its headers: a pass that reads a 512-byte header per
member and seeks over the data) is built once per tar version and kept on disk in sharflow's cache
(`tar-index/`, ~40 bytes a member; loading it costs 34-42x less than the pass in bench_corpora.py),
keyed by the tar's local path, size, mtime and ctime (tar_index_key): prepare,
which reads every tar through anyway, leaves it there, so no later job scans a tar's headers again.
Each process also keeps the 64 most recent indexes in memory. An object is fetched whole into the
object cache once (storage.local_file). Compressed tars (.tar.gz) are not seekable and are not read.

A Parquet row's audio is the `bytes` of its audio column (a struct of bytes and path, as the Hub
writes it): `train.parquet#123` reads row 123's column `audio`, `train.parquet#123:speech` its column
`speech`. A row group's audio column is read once and kept while the next rows come from it (one row
group a process: memory stays that of one row group's audio).
"""

import bisect
import glob
import hashlib
import io
import json
import logging
import os
import re
import tarfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sharflow.core import storage
from sharflow.core.atomic import atomic_file, read_json
from sharflow.core.cache import cache_root

log = logging.getLogger(__name__)

SEPARATOR = "#"
# the suffixes of container files, one per form of corpus that keeps its audio inside containers
# (sharflow.prepare.readers.FORMS): the one place they are listed
TAR, PARQUET = ".tar", ".parquet"
CONTAINER_SUFFIXES = (TAR, PARQUET)
_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")
# A member up to this size is read whole into memory (one read; decoders then seek in C); a longer one
# (an hour of WAV whose segments are records) is read through a window, a span at a time.
WHOLE_MEMBER_BYTES = 8 << 20


class MemberError(FileNotFoundError):
    """A member that its container does not hold (or a container that is not a readable tar)."""


def split_member(path: str) -> tuple[str, str | None]:
    """(container, member) of a member's address; (path, None) for a plain file or object."""
    container, sep, member = str(path).rpartition(SEPARATOR)
    if sep and member and container.endswith(CONTAINER_SUFFIXES):
        return container, member
    return str(path), None


def address(container: str, member: str) -> str:
    """The address of `member` inside `container`."""
    return f"{container}{SEPARATOR}{member}"


def expand_shards(pattern: str, audio_root: str, suffix: str = TAR) -> list[str]:
    """The container files of `pattern`: a brace pattern (`EN-B{000000..000099}.tar`, WebDataset's),
    a folder (every file with `suffix` under it, sorted) or one file; relative to the audio root,
    absolute paths and URLs as given. Under an `s3://` root a name that does not end with `suffix` is
    a folder: every object below it with `suffix`, sorted (one listing request per 1,000 objects)."""
    if storage.is_url(pattern) or os.path.isabs(pattern):
        base = pattern
    else:
        base = (
            f"{audio_root.rstrip('/')}/{pattern}"
            if storage.is_url(audio_root)
            else os.path.join(audio_root, pattern)
        )
    match = _BRACES.search(base)
    if storage.is_url(base):
        if match is None and not base.endswith(suffix):
            return storage.list_folder(base, suffix)
    elif os.path.isdir(base):
        return sorted(glob.glob(os.path.join(glob.escape(base), "**", f"*{suffix}"), recursive=True))
    if match is None:
        return [base]
    first, last = match.group(1), match.group(2)
    width = len(first) if first.startswith("0") or len(first) == len(last) else 0
    names = [
        base[: match.start()] + f"{i:0{width}d}" + base[match.end() :]
        for i in range(int(first), int(last) + 1)
    ]
    return [name for expanded in names for name in expand_shards(expanded, audio_root, suffix)]


def tar_index_key(local: str) -> tuple[str, int, int, int]:
    """What a tar's member index is kept under: the local file's absolute path, size, mtime and ctime
    (ctime too: a tar rewritten at its size, as tars pad to 10 KiB, and given its old mtime back is
    indexed again)."""
    st = os.stat(local)
    return os.path.abspath(local), st.st_size, st.st_mtime_ns, st.st_ctime_ns


def tar_index(container: str) -> dict[str, tuple[int, int]]:
    """{member name: (data offset, size)} of a tar's regular files (the first of a repeated name)."""
    return _tar_index(tar_index_key(storage.local_file(container)))


def add_member(members: dict[str, tuple[int, int]], info: tarfile.TarInfo, size: int) -> None:
    """Index `info` (a tar's header) into `members` as tar_index does; `size`: the tar's bytes."""
    if info.isfile() and info.offset_data + info.size <= size:
        members.setdefault(info.name, (info.offset_data, info.size))


def remember_tar_index(local: str, members: dict[str, tuple[int, int]]) -> None:
    """Keep the index a reader made in one whole pass over the tar at `local` (prepare's), so that no
    later job scans the tar's headers again (unless a job that probed it meanwhile kept it)."""
    key = tar_index_key(local)
    if not _index_file(key).exists():
        _keep(key, members)


def _index_file(key: tuple[str, int, int, int]) -> Path:
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    return cache_root() / "tar-index" / digest[:2] / f"{digest[2:34]}.json"


@lru_cache(maxsize=64)
def _tar_index(key: tuple[str, int, int, int]) -> dict[str, tuple[int, int]]:
    members = kept_tar_index(key)
    if members is None:
        members = scan_tar(key[0], key[1])
        _keep(key, members)
    return members


def kept_tar_index(key: tuple[str, int, int, int]) -> dict[str, tuple[int, int]] | None:
    """The index kept on disk under `key`, or None (not kept yet, or unreadable)."""
    try:
        value = read_json(_index_file(key))
        if value["tar"] == key[0]:
            return {name: (offset, size) for name, offset, size in value["members"]}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def scan_tar(local: str, size: int) -> dict[str, tuple[int, int]]:
    """A tar's member index from its headers (`size`: the tar's bytes)."""
    members: dict[str, tuple[int, int]] = {}
    try:
        with tarfile.open(local, "r:") as tar:
            for info in tar:
                add_member(members, info, size)
    except tarfile.TarError as e:
        raise MemberError(f"{local} is not a readable uncompressed tar ({e})") from None
    return members


def _keep(key: tuple[str, int, int, int], members: dict[str, tuple[int, int]]) -> None:
    value = {"tar": key[0], "members": [[name, *at] for name, at in members.items()]}
    try:
        with atomic_file(_index_file(key), "w", encoding="utf-8") as f:
            json.dump(value, f, separators=(",", ":"))
    except OSError as e:  # a cache that cannot be written costs a scan per process, nothing else
        log.debug("tar index of %s not kept: %s", key[0], e)


def parquet_member(row: int, column: str = "audio") -> str:
    """The member part of a Parquet row's address."""
    return str(row) if column == "audio" else f"{row}:{column}"


def _parquet_bytes(path: str) -> bytes:
    container, member = split_member(path)
    row, _, column = member.partition(":")
    if not row.isdigit():
        raise MemberError(f"{path}: a Parquet row is addressed by its number ({container}#<row>)")
    local = storage.local_file(container)
    st = os.stat(local)
    starts, names = _row_groups(local, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    group = bisect.bisect_right(starts, int(row)) - 1
    if not 0 <= group < len(starts) - 1:
        raise MemberError(f"{container} has {starts[-1]} rows, no row {row}")
    column = column or "audio"
    if column not in names:
        raise MemberError(f"{container} has no column {column!r} (it has {', '.join(names)})")
    values = _group_audio(local, st.st_size, st.st_mtime_ns, st.st_ctime_ns, group, column)
    value = values[int(row) - starts[group]]
    data = value.get("bytes") if isinstance(value, dict) else value
    if not isinstance(data, bytes):
        raise MemberError(f"{container} row {row}: column {column!r} holds no audio bytes")
    return data


@lru_cache(maxsize=64)
def _row_groups(local: str, size: int, mtime_ns: int, ctime_ns: int) -> tuple[list[int], list[str]]:
    """(first row of each row group, then the row count; the column names) of a Parquet file."""
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(local).metadata
    except Exception as e:
        raise MemberError(f"{local} is not a readable Parquet file ({e})") from None
    starts = [0]
    for g in range(meta.num_row_groups):
        starts.append(starts[-1] + meta.row_group(g).num_rows)
    return starts, list(meta.schema.to_arrow_schema().names)


@lru_cache(maxsize=1)
def _group_audio(local: str, size: int, mtime_ns: int, ctime_ns: int, group: int, column: str) -> list:
    import pyarrow.parquet as pq

    return pq.ParquetFile(local).read_row_group(group, columns=[column]).column(0).to_pylist()


def _is_parquet(container: str) -> bool:
    return container.endswith(PARQUET)


def _member(path: str) -> tuple[str, int, int]:
    container, member = split_member(path)
    found = tar_index(container).get(member)
    if found is None:
        raise MemberError(f"{container} holds no member {member!r}")
    return storage.local_file(container), *found


@contextmanager
def audio_source(path: str):
    """What a decoder opens: a plain file's local path (libsndfile reads it in C), or a member's bytes
    as a file object (closed after the block)."""
    if split_member(path)[1] is None:
        yield storage.local_file(path)
        return
    with open_audio(path) as f:
        yield f


def open_audio(path: str):
    """A binary file object over the audio at `path` (a file, an object, or a member): seekable."""
    container, member = split_member(path)
    if member is None:
        return open(storage.local_file(path), "rb")
    if _is_parquet(container):
        return io.BytesIO(_parquet_bytes(path))
    local, offset, length = _member(path)
    if length <= WHOLE_MEMBER_BYTES:
        with open(local, "rb") as f:
            return io.BytesIO(os.pread(f.fileno(), length, offset))
    return MemberFile(local, offset, length)


def size(path: str) -> int:
    """Bytes of the audio at `path`."""
    container, member = split_member(path)
    if member is None:
        return storage.size(path)
    return len(_parquet_bytes(path)) if _is_parquet(container) else _member(path)[2]


def stamp(path: str) -> list:
    """[size, version] of the audio at `path`; a member's version is its container's and its offset
    there, so that a container replaced under its name makes its members' results stale."""
    container, member = split_member(path)
    if member is None:
        return storage.stamp(path)
    if _is_parquet(container):
        return [len(_parquet_bytes(path)), [*storage.stamp(container), member]]
    _, offset, length = _member(path)
    return [length, [*storage.stamp(container), offset]]


def exists(path: str) -> bool:
    """Whether the audio at `path` can be opened."""
    container, member = split_member(path)
    if member is None:
        return storage.exists(path)
    if not storage.exists(container):
        return False
    try:
        return bool(_parquet_bytes(path)) if _is_parquet(container) else member in tar_index(container)
    except MemberError:
        return False


class MemberFile(io.RawIOBase):
    """A read-only, seekable window [offset, offset + size) over a file: one tar member's bytes."""

    def __init__(self, path: str, offset: int, size: int):
        super().__init__()
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close(): the window owns it)
        self._start, self._size, self._pos = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self._size - self._pos))
        if n == 0:
            return 0
        self._file.seek(self._start + self._pos)
        got = self._file.readinto(memoryview(buffer)[:n])
        self._pos += got
        return got

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()
