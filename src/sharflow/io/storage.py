"""Objects on S3-compatible storage: URLs, the one client, reads by range, a bounded local copy per
object version, clear errors.

A corpus may live on object storage: a dataset's `audio_root` and `manifest` may be `s3://bucket/key`
URLs (AWS, or any S3 API: MinIO, Ceph, AIStore's `/s3` endpoint, moto in the tests). What each reader
fetches:

- **Containers** (tars, Parquet files: sharflow.io.containers) are never copied. Prepare reads a
  tar once as a stream (`stream`); later jobs fetch the members they read by byte range
  (`get_range`), and Parquet footers and row groups through a seekable window of range requests
  (`RangeFile`).
- **Loose objects** (an audio file, a manifest) are fetched whole into the object cache (`held_file`,
  `open_object`, `local_file`), under a name that carries the ETag, once per node and object version;
  the cache is bounded and evicts least recently used copies no job holds (sharflow.core.
  object_cache). `$SHARFLOW_OBJECT_CACHE` names it, else `objects/` in sharflow's cache.
- **Versions.** Every GET asks for the ETag its caller knows (If-Match): an object replaced meanwhile
  fails loudly instead of mixing versions. A folder's listing (one request per 1,000 objects) gives
  every object's size and ETag, and `head` answers from it without a HEAD request; stamps built from
  them (size and ETag in place of size and mtime) change when an object is replaced, as they do for a
  local file that changed.

Credentials come only from the environment or an AWS profile (boto3's own chain: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL for a non-AWS store); no config key holds one.
A wrong endpoint, a missing bucket or denied access raises one StorageError naming the URL and
what to do; a missing object is a FileNotFoundError (prepare rejects its record as missing_audio).
"""

import hashlib
import io
import os
import posixpath
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sharflow.core.cache import cache_root
from sharflow.core.errors import SharflowError
from sharflow.io import object_cache as bounded

SCHEMES = ("s3",)  # what boto3 serves; ais:// and others may be written into the hand-off (docs)
_CHUNK = 1 << 20


class StorageError(SharflowError):
    """The object store cannot be reached or refuses: names the URL and what to do."""


class ObjectReplaced(StorageError):
    """A GET asked for a version (If-Match) the object no longer has: it was replaced meanwhile."""


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD request says of an object."""

    size: int
    etag: str  # without its quotes


def is_url(path) -> bool:
    """Whether `path` is a URL (`scheme://...`) rather than a local path."""
    return "://" in str(path)


def split_url(url: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` URL; StorageError for another scheme or no bucket."""
    scheme, _, rest = str(url).partition("://")
    if scheme not in SCHEMES:
        raise StorageError(
            f"{url}: sharflow reads and writes {', '.join(s + '://' for s in SCHEMES)} URLs only; "
            "an AIStore or other S3-compatible store is reached as s3:// with AWS_ENDPOINT_URL"
        )
    bucket, _, key = rest.partition("/")
    if len(bucket) < 3:
        raise StorageError(f"{url}: no bucket name (s3://bucket/key)")
    return bucket, key


def normalize_url(url: str) -> str:
    """The URL with `.` and `..` folded out of its key (lexically, as for local paths)."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    folded = posixpath.normpath("/" + key).lstrip("/") if key else ""
    return f"{scheme}://{bucket}/{folded}" if folded else f"{scheme}://{bucket}"


@lru_cache(maxsize=1)
def client():
    """The S3 client of this process, configured from the environment alone (retries: standard, 5)."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=120)
    made = boto3.session.Session().client("s3", config=config)
    if os.environ.get(REQUEST_LOG):
        made.meta.events.register("before-send.s3", _log_request)
    return made


# A file every request of every process is appended to (operation, URL, Range: tab-separated), when
# set: what a run, a parse or a job asks of the store (the tests count a dry run's with it).
REQUEST_LOG = "SHARFLOW_REQUEST_LOG"


def _described(request) -> tuple[str, str]:
    """(URL without its query, Range header or "") of a request about to be sent."""
    span = request.headers.get("Range") or ""
    return str(request.url).split("?")[0], span.decode() if isinstance(span, bytes) else str(span)


def _log_request(event_name: str = "", request=None, **_) -> None:
    url, span = _described(request) if request is not None else ("", "")
    line = f"{event_name.rsplit('.', 1)[-1]}\t{url}\t{span}\n".encode()
    fd = os.open(os.environ[REQUEST_LOG], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of one line: lines of processes that append at once stay whole
    finally:
        os.close(fd)


# A forked child makes its own client: a connection pool shared across processes mixes their replies.
os.register_at_fork(after_in_child=client.cache_clear)


def endpoint() -> str:
    """The endpoint requests go to, for messages."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"


def storage_error(url: str, exc: Exception) -> Exception:
    """The error to raise for a failed request on `url`: a StorageError that says what to do, or a
    FileNotFoundError for a missing object."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    where = f"{url} (endpoint {endpoint()})"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return StorageError(
            f"{where}: no credentials. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) "
            "in the environment of the run; sharflow takes none from its config"
        )
    if not isinstance(exc, ClientError):
        return StorageError(
            f"{where}: the object store cannot be reached ({type(exc).__name__}: {exc}). "
            "Check AWS_ENDPOINT_URL and the network"
        )
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("NoSuchBucket",) or (code in ("404", "NotFound", "NoSuchKey") and not bucket_exists(url)):
        return StorageError(f"{where}: bucket {split_url(url)[0]!r} does not exist. Create it or fix the URL")
    if code in ("404", "NotFound", "NoSuchKey"):
        return FileNotFoundError(f"no object at {url}")
    if code == "PreconditionFailed" or status == 412:
        return ObjectReplaced(
            f"{where}: the object was replaced since sharflow read it (PreconditionFailed: its ETag is not "
            "the one this read asks for). Run the workflow again: prepare reads the new version and every "
            "stage after it follows"
        )
    if status == 403 or code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
        return StorageError(
            f"{where}: access denied ({code}). Check the credentials in the environment "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and the bucket's policy"
        )
    return StorageError(f"{where}: the request failed ({code or status}: {exc})")


@lru_cache(maxsize=256)
def bucket_exists(url: str) -> bool:
    """Whether the bucket of `url` exists (HEAD bucket); True where that cannot be told (403).
    StorageError where the store cannot be reached or no credentials are set."""
    from botocore.exceptions import ClientError

    try:
        client().head_bucket(Bucket=split_url(url)[0])
    except ClientError as e:
        return str(e.response.get("Error", {}).get("Code")) not in ("404", "NoSuchBucket", "NotFound")
    except Exception as e:
        raise storage_error(url, e) from e
    return True


# What this process's listings said of each object: head() answers from it, sending no request.
_LISTED: dict[str, ObjectInfo] = {}


@lru_cache(maxsize=65536)
def head(url: str) -> ObjectInfo:
    """Size and ETag of the object at `url`: from a listing this process made (list_folder), else one
    HEAD request per URL and process."""
    if url in _LISTED:
        return _LISTED[url]
    bucket, key = split_url(url)
    try:
        meta = client().head_object(Bucket=bucket, Key=key)
    except Exception as e:
        raise storage_error(url, e) from e
    return ObjectInfo(int(meta["ContentLength"]), meta["ETag"].strip('"'))


def stamp(path: str) -> list:
    """[size, version] of a file or object: its mtime in ns for a local file, its ETag for an object.
    What keys of measures depend on, so that a file replaced under its name is measured again."""
    if is_url(path):
        info = head(path)
        return [info.size, info.etag]
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def size(path: str) -> int:
    """Bytes of a file or object."""
    return head(path).size if is_url(path) else os.path.getsize(path)


def exists(path: str) -> bool:
    """Whether a file can be opened, or an object is there (StorageError if the store cannot tell)."""
    if is_url(path):
        try:
            head(path)
        except FileNotFoundError:
            return False
        return True
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def listing(bucket: str, prefix: str) -> dict[str, tuple[int, str]]:
    """{key: (size, ETag)} of every object under `prefix` (one request per 1,000 objects)."""
    out = {}
    pages = client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", ()):
            out[obj["Key"]] = (int(obj["Size"]), obj["ETag"].strip('"'))
    return out


def list_folder(url: str, suffix: str) -> list[str]:
    """The URLs of the objects under the folder `url` (every key below `<key>/`, as a recursive glob
    of a local folder) whose names end with `suffix`, sorted."""
    bucket, key = split_url(url)
    prefix = key.rstrip("/") + "/" if key.strip("/") else ""
    try:
        keys = listing(bucket, prefix)
    except Exception as e:
        raise storage_error(url, e) from e
    return sorted(_learn(bucket, {k: v for k, v in keys.items() if k.endswith(suffix)}))


def list_prefix(url: str) -> list[str]:
    """The URLs of the objects whose keys begin with the key of `url` (`s3://b/audio/EN-B` lists
    `audio/EN-B000000.tar`, ...), sorted: what a brace pattern's objects are learnt from, one
    request per 1,000 objects in place of a HEAD each."""
    bucket, key = split_url(url)
    try:
        keys = listing(bucket, key)
    except Exception as e:
        raise storage_error(url, e) from e
    return sorted(_learn(bucket, keys))


def _learn(bucket: str, keys: dict[str, tuple[int, str]]) -> list[str]:
    """Keep what a listing said of each object (head answers from it); their URLs."""
    urls = []
    for name, (n, etag) in keys.items():
        urls.append(f"s3://{bucket}/{name}")
        _LISTED[urls[-1]] = ObjectInfo(n, etag)
    return urls


def forget_listings() -> None:
    """Drop what listings said (and HEADs answered): the next question asks the store again."""
    _LISTED.clear()
    head.cache_clear()


def object_cache() -> Path:
    """Where local copies of objects are kept: $SHARFLOW_OBJECT_CACHE, else sharflow's cache/objects."""
    return Path(os.environ.get("SHARFLOW_OBJECT_CACHE") or cache_root() / "objects")


def _copy_name(url: str, info: ObjectInfo) -> Path:
    bucket, key = split_url(url)
    digest = hashlib.sha256(url.encode()).hexdigest()
    suffix = posixpath.splitext(key)[1][:16]
    return object_cache() / bucket / digest[:2] / f"{digest[2:24]}-{info.etag[:40]}{suffix}"


def _download(url: str, info: ObjectInfo, target: Path) -> None:
    """The object's bytes at `target`, written under a temp name beside it (room reserved in the
    bounded cache first) and renamed when complete; If-Match: the version `info` names, or an error."""
    bucket, key = split_url(url)
    root = object_cache()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=bounded.PART)
    os.close(fd)
    kept = False
    try:
        bounded.reserve(root, Path(tmp), info.size)
        with open(tmp, "wb") as out:
            try:
                body = client().get_object(Bucket=bucket, Key=key, IfMatch=f'"{info.etag}"')["Body"]
                for chunk in body.iter_chunks(_CHUNK):
                    out.write(chunk)
                    _received(len(chunk))
            except Exception as e:
                raise storage_error(url, e) from e
        os.replace(tmp, target)
        kept = True
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        bounded.settle(root, Path(tmp), kept)


def open_object(path: str):
    """A binary file over the bytes at `path`: the file itself, or for a URL its copy in the object
    cache (downloaded, whole, once per object version, when not there), held while the file is open
    so that no eviction removes it meanwhile."""
    if not is_url(path):
        return open(path, "rb")
    info = head(path)
    target = _copy_name(path, info)
    for _ in range(3):  # a copy evicted between its download and its opening is fetched again
        if not (target.is_file() and target.stat().st_size == info.size):
            _download(path, info, target)
        held = bounded.hold(target)
        if held is not None:
            return held
    raise StorageError(
        f"{path}: its copy in the object cache was evicted three times as it was opened; "
        "raise SHARFLOW_OBJECT_CACHE_SIZE"
    )


@contextmanager
def held_file(path: str):
    """A local path holding the bytes at `path` while the block runs: `path` itself, or for a URL its
    copy in the object cache (open_object), which no eviction removes before the block ends."""
    if not is_url(path):
        yield path
        return
    with open_object(path) as f:
        yield f.name


_HELD: dict[str, object] = {}  # local_file's copies, held until this process ends


def local_file(path: str) -> str:
    """A local file holding the bytes at `path` for the rest of this process (a manifest that a job
    reads through): `path` itself, or for a URL its copy in the object cache, held (open_object).
    Audio is read through held_file or open_object, held only while it is read."""
    if not is_url(path):
        return path
    info = head(path)
    name = str(_copy_name(path, info))
    if name not in _HELD or not (os.path.isfile(name) and os.path.getsize(name) == info.size):
        _HELD[name] = open_object(path)
    return name


# ---- range reads ---------------------------------------------------------------------------------


def get_range(url: str, start: int, length: int, etag: str) -> bytes:
    """`length` bytes of the object at `url` from byte `start` (one ranged GET; If-Match `etag`)."""
    if length <= 0:
        return b""
    bucket, key = split_url(url)
    try:
        body = client().get_object(
            Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}", IfMatch=f'"{etag}"'
        )["Body"]
        data = body.read()
    except Exception as e:
        raise storage_error(url, e) from e
    _received(len(data))
    if len(data) != length:
        raise StorageError(f"{url}: asked for bytes {start}-{start + length - 1}, got {len(data)} bytes")
    return data


class ObjectStream(io.RawIOBase):
    """The object at `url` read once, front to back, as one GET (If-Match `etag`): no local copy.

    Readable, and seekable forward only (a seek ahead reads and drops the bytes between), as tarfile
    reads a tar's headers and skips its members' data; `tell` is the place in the object."""

    def __init__(self, url: str, etag: str):
        super().__init__()
        bucket, key = split_url(url)
        self.url, self._pos = url, 0
        try:
            self._body = client().get_object(Bucket=bucket, Key=key, IfMatch=f'"{etag}"')["Body"]
        except Exception as e:
            raise storage_error(url, e) from e

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = b""
        try:
            while len(data) < len(buffer):  # whole reads: tarfile takes a short header read for a cut
                more = self._body.read(len(buffer) - len(data))
                if not more:
                    break
                data += more
        except Exception as e:
            raise storage_error(self.url, e) from e
        buffer[: len(data)] = data
        self._pos += len(data)
        _received(len(data))
        return len(data)

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        target = pos if whence == io.SEEK_SET else self._pos + pos
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self._pos:
            raise io.UnsupportedOperation(f"{self.url} is read as a stream: no seek back to {target}")
        while self._pos < target:
            if not self.read(min(_CHUNK, target - self._pos)):
                break  # the object ends here: reads past it give nothing
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        if not self.closed:
            self._body.close()
        super().close()


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over the object at `url` (`info`: its size and ETag), each read a
    ranged GET of what it asks for, at least `block` bytes (kept for the next read): what pyarrow
    reads a Parquet file's footer and row groups through, and a tar's headers are scanned through
    where no index was kept."""

    def __init__(self, url: str, info: ObjectInfo, block: int = 64 << 10):
        super().__init__()
        self.url, self.info, self._block = url, info, block
        self._pos, self._at, self._data = 0, 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self.info.size

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self.info.size - self._pos))
        if n == 0:
            return 0
        if not (self._at <= self._pos and self._pos + n <= self._at + len(self._data)):
            length = min(max(n, self._block), self.info.size - self._pos)
            self._at, self._data = self._pos, get_range(self.url, self._pos, length, self.info.etag)
        start = self._pos - self._at
        buffer[:n] = self._data[start : start + n]
        self._pos += n
        return n

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.info.size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def tell(self) -> int:
        return self._pos


# ---- counting ------------------------------------------------------------------------------------
_COUNTERS: list["RequestCount"] = []
_COUNT_LOCK = threading.Lock()


def _received(n: int) -> None:
    with _COUNT_LOCK:
        for counter in _COUNTERS:
            counter.bytes += n


class RequestCount:
    """Counts the requests this process's client sends while the block runs (`with RequestCount() as n`,
    then `n.total`, `n.by_operation`, `n.bytes` of object bodies received, and `n.requests`: each
    request's operation, URL and Range header, "" for none): what reading and publishing cost, in
    their stats, tests and benchmarks."""

    def __init__(self):
        self.total = 0
        self.bytes = 0
        self.by_operation: dict[str, int] = {}
        self.requests: list[tuple[str, str, str]] = []

    def _count(self, event_name: str = "", request=None, **_):
        name = event_name.rsplit(".", 1)[-1]
        with _COUNT_LOCK:
            self.total += 1  # every attempt: a retried request counts each time it is sent
            self.by_operation[name] = self.by_operation.get(name, 0) + 1
            if request is not None:
                self.requests.append((name, *_described(request)))

    def __enter__(self) -> "RequestCount":
        client().meta.events.register("before-send.s3", self._count)
        with _COUNT_LOCK:
            _COUNTERS.append(self)
        return self

    def __exit__(self, *exc) -> None:
        client().meta.events.unregister("before-send.s3", self._count)
        with _COUNT_LOCK:
            _COUNTERS.remove(self)
