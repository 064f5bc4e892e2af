"""Audio where it lies: a record's audio as a member of a tar (WebDataset shards) or a row of a
Parquet file (the Hub's Audio feature), read in place.

A record's `audio_filepath` may address a member inside a container, `<container>.tar#<member>` or
`<container>.parquet#<row>` (the URL fragment's meaning: a part inside), the container a path under
the audio root or an object under an `s3://` root. Every stage opens audio through this module
(`open_audio`, `size`, `stamp`, `exists`), which hands a plain file or object to sharflow.io.storage
and a member to its bytes inside the container, so nothing is extracted and a member's bytes are read
only when its audio is.

A tar member is read whole up to WHOLE_MEMBER_BYTES, else through a window over the tar. A tar's
member index (name -> data offset and size, from its headers) is built once per tar version and kept
on disk in sharflow's cache (`tar-index/`, ~75 bytes a member, a line each sorted by name): a local
tar's keyed by its path, size, mtime and ctime (tar_index_key), an object's by its URL, holding the
size and ETag it is of. Prepare, which reads every tar through anyway (an object as one stream, never
copied), leaves it there, so no later job scans a tar's headers again. A tar cut short keeps the
index of its members before the cut, marked `truncated`. A kept index is read in place (KeptIndex:
the file mapped, a member found by binary search), so a job that reads from thousands of tars opens
each in ~0.03 ms and holds none of them in its memory.

A member of a tar on object storage is fetched by range (one GET of its bytes, If-Match the ETag of
the index: an object replaced since prepare fails loudly), never the whole tar; a job that knows its
reading order fetches a batch at once (`prefetched`: adjacent members coalesced, GETs concurrent).
Compressed tars (.tar.gz) are not seekable and are not read.

A Parquet row's audio is the `bytes` of its audio column (a struct of bytes and path, as the Hub
writes it): `train.parquet#123` reads row 123's column `audio`, `train.parquet#123:speech` its column
`speech`. A row group's audio column is read once and kept while the next rows come from it (the
GROUPS_KEPT last row groups a process read: memory stays that of a few row groups' audio). On object
storage the footer and that column of that row group are read by range (RangeFile), never the whole
file.
"""

import bisect
import glob
import hashlib
import io
import json
import logging
import mmap
import os
import re
import tarfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sharflow.core.atomic import atomic_file
from sharflow.core.cache import cache_root
from sharflow.io import storage

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
# Members of tars on object storage (prefetched): at most this many ranged GETs at once per process,
# runs of adjacent members up to RUN_BYTES a GET, MAX_GAP bytes between two members of one run; a
# tar's headers read by range where no index was kept, SCAN_BLOCK bytes a request at least.
MAX_CONCURRENT, RUN_BYTES, MAX_GAP, SCAN_BLOCK = 8, 16 << 20, 64 << 10, 64 << 10
# Row groups whose audio column a process keeps (a record and its context often lie in two)
GROUPS_KEPT = 4


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
    a folder: every object below it with `suffix`, sorted (one listing request per 1,000 objects), and
    a brace pattern's objects are listed by the key before the brace: either way their sizes and ETags
    come with the listing (storage.head asks no more)."""
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
        if match is not None:  # their versions, one LIST per 1,000 objects (no HEAD each)
            storage.list_prefix(base[: match.start()])
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


def has_braces(pattern: str) -> bool:
    """Whether `pattern` holds a WebDataset brace range (`{000000..000099}`)."""
    return _BRACES.search(pattern) is not None


def tar_index_key(local: str) -> tuple[str, int, int, int]:
    """What a local tar's member index is kept under: the file's absolute path, size, mtime and ctime
    (ctime too: a tar rewritten at its size, as tars pad to 10 KiB, and given its old mtime back is
    indexed again). An object's index is kept under its URL and holds the ETag it is of."""
    st = os.stat(local)
    return os.path.abspath(local), st.st_size, st.st_mtime_ns, st.st_ctime_ns


class TarIndex(dict):
    """{member name: (data offset, size)} of a tar's complete regular files (the first of a repeated
    name). `truncated`: the tar ends inside a member or a header, and the index holds the members
    before the cut (no reader trusts past it, none scans it again); `size` and `etag`: the object's
    bytes and version the offsets are of (an object's index; 0 and "" for a local file's)."""

    truncated = False
    size = 0
    etag = ""


class KeptIndex(Mapping):
    """A tar's member index as kept on disk, read in place: a header line (what tar and version it is
    of, whether cut short, how many members), then a line per member (its name as JSON, its data
    offset and size), sorted by name. A lookup maps the file and binary-searches it (a few pages), so
    a process that reads members of thousands of tars neither loads nor holds their indexes (an
    Emilia tar's 14,000 members are 0.7 MB on disk; as a dict 3.5 MB, parsed in 5-6 ms;
    bench_corpora.py). No file stays open between lookups: a process holding thousands runs out of
    no descriptors."""

    def __init__(self, path: Path, header: bytes):
        self.path, self._header = path, header
        value = json.loads(header)
        self.truncated = bool(value.get("truncated", False))
        self.size, self.etag = int(value.get("size", 0)), str(value.get("etag", ""))
        self._count = int(value["count"])

    @contextmanager
    def _body(self):
        """The kept file, mapped (bytes when it holds no member lines); MemberError when it was
        replaced since this index was opened (another version of the tar indexed meanwhile)."""
        with open(self.path, "rb") as f:
            if f.read(len(self._header)) != self._header:
                raise MemberError(f"the index of {self.path} changed while it was read: run again")
            if os.fstat(f.fileno()).st_size == len(self._header):
                yield b""
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as body:
                yield body

    def __getitem__(self, name: str) -> tuple[int, int]:
        want = json.dumps(name).encode()
        with self._body() as body:
            lo, hi = len(self._header), len(body)
            while lo < hi:  # lo and hi are line starts; the line holding the middle byte is compared
                mid = (lo + hi) // 2
                start = max(body.rfind(b"\n", lo, mid) + 1, lo)
                end = body.find(b"\n", mid)
                key, _, rest = body[start:end].partition(b"\t")
                if key == want:
                    offset, _, size = rest.partition(b"\t")
                    return int(offset), int(size)
                if key < want:
                    lo = end + 1
                else:
                    hi = start
        raise KeyError(name)

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        with self._body() as body:
            lines = bytes(body[len(self._header) :]).splitlines()
        for line in lines:
            yield json.loads(line.partition(b"\t")[0])


def tar_index(container: str) -> "KeptIndex | TarIndex":
    """The member index of a tar (a local file or an object): kept on disk by prepare's pass, else
    built here from its headers and kept; read in place (KeptIndex)."""
    if storage.is_url(container):
        return _url_tar_index(container)
    return _tar_index(tar_index_key(container))


def add_member(members: dict[str, tuple[int, int]], info: tarfile.TarInfo, size: int) -> None:
    """Index `info` (a tar's header) into `members` as tar_index does; `size`: the tar's bytes."""
    if info.isfile() and info.offset_data + info.size <= size:
        members.setdefault(info.name, (info.offset_data, info.size))


def remember_tar_index(tar: str, members: dict[str, tuple[int, int]], *, truncated: bool = False) -> None:
    """Keep the index a reader made in one whole pass over the tar at `tar` (prepare's: a local file,
    or an object it streamed, whose version storage.head knows), so that no later job scans the tar's
    headers again; `truncated`: the pass ended at a cut."""
    index = TarIndex(members)
    index.truncated = truncated
    if storage.is_url(tar):
        info = storage.head(tar)
        index.size, index.etag = info.size, info.etag
        kept = kept_tar_index((tar,))
        if kept is None or (kept.etag, kept.size) != (index.etag, index.size):
            _keep((tar,), index)
        return
    key = tar_index_key(tar)
    if not _index_file(key).exists():
        _keep(key, index)


def _index_file(key: tuple) -> Path:
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    return cache_root() / "tar-index" / digest[:2] / f"{digest[2:34]}.json"


@lru_cache(maxsize=1024)
def _tar_index(key: tuple[str, int, int, int]) -> "KeptIndex | TarIndex":
    members = kept_tar_index(key)
    if members is None:
        members = scan_tar(key[0], key[1])
        members = _keep(key, members)
    return members


@lru_cache(maxsize=4096)  # each a mapped file: pages the OS keeps or drops, not the process's memory
def _url_tar_index(url: str) -> "KeptIndex | TarIndex":
    """An object's index: the one kept under its URL (its reads ask for the ETag it is of: an object
    replaced since fails loudly), else one HEAD and its headers read by range (RangeFile), kept."""
    members = kept_tar_index((url,))
    if members is None:
        info = storage.head(url)
        with storage.RangeFile(url, info, block=SCAN_BLOCK) as f:
            members = _scan(f, info.size, url)
        members.size, members.etag = info.size, info.etag
        members = _keep((url,), members)
    return members


def forget_tar_index(url: str) -> None:
    """Drop the index kept of an object (it was replaced since it was indexed): the next reader
    indexes the object it finds, or prepare's pass over it keeps a new one."""
    _index_file((url,)).unlink(missing_ok=True)
    _url_tar_index.cache_clear()


def kept_tar_index(key: tuple) -> KeptIndex | None:
    """The index kept on disk under `key`, read in place, or None (not kept yet, of another tar, in
    an older sharflow's form, or unreadable)."""
    path = _index_file(key)
    try:
        with open(path, "rb") as f:
            header = f.readline()
        value = json.loads(header)
        if isinstance(value, dict) and value.get("tar") == key[0] and "count" in value:
            return KeptIndex(path, header)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def scan_tar(local: str, size: int) -> TarIndex:
    """A local tar's member index from its headers (`size`: the tar's bytes)."""
    with open(local, "rb") as f:
        return _scan(f, size, local)


def _scan(f, size: int, name: str) -> TarIndex:
    """The member index of the tar read through `f` (seekable, or a forward-only stream): the members
    before a cut where the tar is cut short (`truncated`); MemberError where it is no tar at all."""
    members = TarIndex()
    try:
        archive = tarfile.open(fileobj=f, mode="r:")  # noqa: SIM115 (closes nothing of `f`'s)
    except tarfile.TarError as e:
        raise MemberError(f"{name} is not a readable uncompressed tar ({e})") from None
    try:
        for info in archive:
            if info.offset_data + info.size > size:
                members.truncated = True
                break
            add_member(members, info, size)
    except tarfile.TarError:
        members.truncated = True
    return members


def _keep(key: tuple, members: TarIndex) -> "KeptIndex | TarIndex":
    """Keep `members` on disk under `key` (a line per member, sorted by name: KeptIndex); the kept
    index, or `members` where the cache cannot be written (a scan per process, nothing else)."""
    header = {
        "tar": key[0],
        "count": len(members),
        "truncated": members.truncated,
        **({"size": members.size, "etag": members.etag} if members.etag else {}),
    }
    lines = sorted(b"%s\t%d\t%d\n" % (json.dumps(name).encode(), *at) for name, at in members.items())
    try:
        with atomic_file(_index_file(key), "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            f.writelines(lines)
    except OSError as e:
        log.debug("tar index of %s not kept: %s", key[0], e)
        return members
    return kept_tar_index(key) or members


# ---- members of objects, fetched by range --------------------------------------------------------
_PREFETCHED: dict[str, bytes] = {}


@contextmanager
def prefetched(paths):
    """Within the block, the members among `paths` (addresses, in reading order) of tars on object
    storage are read from memory: fetched on entry by range, members adjacent in `paths` and in their
    tar coalesced into one GET (the bytes between them at most MAX_GAP and a tenth of the next
    member), MAX_CONCURRENT GETs at once. Anything else in `paths` is read as without the block."""
    runs: list[list] = []  # [url, etag, start, end, [(path, offset, length)]]
    for path in dict.fromkeys(paths):
        container, member = split_member(path)
        if member is None or not storage.is_url(container) or _is_parquet(container) or path in _PREFETCHED:
            continue
        try:
            index = tar_index(container)
        except (MemberError, FileNotFoundError):
            continue  # the read itself says what is wrong
        if member not in index or index[member][1] > WHOLE_MEMBER_BYTES:
            continue
        offset, length = index[member]
        last = runs[-1] if runs else None
        gap = offset - last[3] if last and last[0] == container else -1
        if last and 0 <= gap <= min(MAX_GAP, length // 10) and last[3] - last[2] + gap + length <= RUN_BYTES:
            last[3] = offset + length
            last[4].append((path, offset, length))
        else:
            runs.append([container, index.etag, offset, offset + length, [(path, offset, length)]])

    def fetch(run):
        url, etag, start, end, members = run
        try:
            data = storage.get_range(url, start, end - start, etag)
        except (OSError, storage.StorageError):
            return {}  # the read itself fails, naming what is wrong, for its record alone
        return {path: data[offset - start : offset - start + length] for path, offset, length in members}

    fetched: list[str] = []
    try:
        if runs:
            with ThreadPoolExecutor(min(MAX_CONCURRENT, len(runs))) as pool:
                for got in pool.map(fetch, runs):
                    _PREFETCHED.update(got)
                    fetched += got
        yield
    finally:
        for path in fetched:
            _PREFETCHED.pop(path, None)


def parquet_member(row: int, column: str = "audio") -> str:
    """The member part of a Parquet row's address."""
    return str(row) if column == "audio" else f"{row}:{column}"


def _parquet_bytes(path: str) -> bytes:
    container, member = split_member(path)
    row, _, column = member.partition(":")
    if not row.isdigit():
        raise MemberError(f"{path}: a Parquet row is addressed by its number ({container}#<row>)")
    version = _version(container)
    starts, names = _row_groups(container, version)
    group = bisect.bisect_right(starts, int(row)) - 1
    if not 0 <= group < len(starts) - 1:
        raise MemberError(f"{container} has {starts[-1]} rows, no row {row}")
    column = column or "audio"
    if column not in names:
        raise MemberError(f"{container} has no column {column!r} (it has {', '.join(names)})")
    values = _group_audio(container, version, group, column)
    value = values[int(row) - starts[group]]
    data = value.get("bytes") if isinstance(value, dict) else value
    if not isinstance(data, bytes):
        raise MemberError(f"{container} row {row}: column {column!r} holds no audio bytes")
    return data


def _version(container: str) -> tuple:
    """What a Parquet file's cached row groups depend on: an object's size and ETag, a file's size,
    mtime and ctime."""
    if storage.is_url(container):
        info = storage.head(container)
        return info.size, info.etag
    st = os.stat(container)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _parquet_file(container: str, version: tuple):
    """pyarrow's reader of a Parquet file: an object's footer and row groups read by range."""
    import pyarrow.parquet as pq

    if storage.is_url(container):
        return pq.ParquetFile(storage.RangeFile(container, storage.ObjectInfo(*version)))
    return pq.ParquetFile(container)


@lru_cache(maxsize=64)
def _row_groups(container: str, version: tuple) -> tuple[list[int], list[str]]:
    """(first row of each row group, then the row count; the column names) of a Parquet file."""
    try:
        meta = _parquet_file(container, version).metadata
    except storage.StorageError:
        raise
    except Exception as e:
        raise MemberError(f"{container} is not a readable Parquet file ({e})") from None
    starts = [0]
    for g in range(meta.num_row_groups):
        starts.append(starts[-1] + meta.row_group(g).num_rows)
    return starts, list(meta.schema.to_arrow_schema().names)


@lru_cache(maxsize=GROUPS_KEPT)
def _group_audio(container: str, version: tuple, group: int, column: str) -> list:
    return _parquet_file(container, version).read_row_group(group, columns=[column]).column(0).to_pylist()


def _is_parquet(container: str) -> bool:
    return container.endswith(PARQUET)


def _member(path: str) -> tuple[str, int, int, TarIndex]:
    """(container, data offset, size, its tar's index) of a tar member."""
    container, member = split_member(path)
    index = tar_index(container)
    found = index.get(member)
    if found is None:
        cut = " (the tar is cut short before it)" if index.truncated else ""
        raise MemberError(f"{container} holds no member {member!r}{cut}")
    return container, *found, index


@contextmanager
def audio_source(path: str):
    """What a decoder opens: a plain file's local path (libsndfile reads it in C; an object's copy in
    the object cache, held while the block runs), or a member's bytes as a file object (closed after
    the block)."""
    if split_member(path)[1] is None:
        with storage.held_file(path) as local:
            yield local
        return
    with open_audio(path) as f:
        yield f


def open_audio(path: str):
    """A binary file object over the audio at `path` (a file, an object, or a member): seekable."""
    container, member = split_member(path)
    if member is None:
        return storage.open_object(path)
    if _is_parquet(container):
        return io.BytesIO(_parquet_bytes(path))
    if path in _PREFETCHED:
        return io.BytesIO(_PREFETCHED[path])
    container, offset, length, index = _member(path)
    if storage.is_url(container):
        if length > WHOLE_MEMBER_BYTES:
            return MemberFile(
                storage.RangeFile(container, storage.ObjectInfo(index.size, index.etag)), offset, length
            )
        try:
            return io.BytesIO(storage.get_range(container, offset, length, index.etag))
        except storage.ObjectReplaced:
            forget_tar_index(container)  # the next run indexes the object it finds
            raise
    if length <= WHOLE_MEMBER_BYTES:
        with open(container, "rb") as f:
            return io.BytesIO(os.pread(f.fileno(), length, offset))
    return MemberFile(open(container, "rb"), offset, length)


def size(path: str) -> int:
    """Bytes of the audio at `path`."""
    container, member = split_member(path)
    if member is None:
        return storage.size(path)
    return len(_parquet_bytes(path)) if _is_parquet(container) else _member(path)[2]


def stamp(path: str) -> list:
    """[size, version] of the audio at `path`; a member's version is its container's and its offset
    there, so that a container replaced under its name makes its members' results stale (an object's
    from its index: the version its reads ask for, no request)."""
    container, member = split_member(path)
    if member is None:
        return storage.stamp(path)
    if _is_parquet(container):
        return [len(_parquet_bytes(path)), [*storage.stamp(container), member]]
    _, offset, length, index = _member(path)
    version = [index.size, index.etag] if storage.is_url(container) else storage.stamp(container)
    return [length, [*version, offset]]


def exists(path: str) -> bool:
    """Whether the audio at `path` can be opened."""
    container, member = split_member(path)
    if member is None:
        return storage.exists(path)
    if _is_parquet(container):
        if not storage.exists(container):
            return False
        try:
            return bool(_parquet_bytes(path))
        except MemberError:
            return False
    try:
        return member in tar_index(container)
    except (MemberError, FileNotFoundError):
        return False


class MemberFile(io.RawIOBase):
    """A read-only, seekable window [offset, offset + size) over a file object (a local file, or an
    object's RangeFile): one tar member's bytes. Owns `file` (closes it)."""

    def __init__(self, file, offset: int, size: int):
        super().__init__()
        self._file = file
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
