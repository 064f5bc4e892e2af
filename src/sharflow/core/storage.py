"""Objects on S3-compatible storage: URLs, the one client, a local copy per object version, clear errors.

A corpus may live on object storage: a dataset's `audio_root` and `manifest` may be `s3://bucket/key`
URLs (AWS, or any S3 API: MinIO, Ceph, AIStore's `/s3` endpoint, moto in the tests). Every reader of
audio (prepare's header probes, quality, identity, context, shar) goes through `local_file`, which
gives a local file holding the object's bytes: the object is downloaded once per node, whole, into
the object cache, under a name that carries its ETag. A later stage on that node reads the copy
(one HEAD request to learn the ETag; no download); an object replaced under the same URL has
another ETag, so it is fetched again and keys built from `stamp` (size and ETag in place of size and
mtime) change, as they do for a local file that changed. The cache is `$SHARFLOW_OBJECT_CACHE`,
else `objects/` in sharflow's cache (sharflow.core.cache.cache_root): on a cluster, node-local
scratch (one download per node) or a shared folder (one download in all). Copies are not evicted.

Credentials come only from the environment or an AWS profile (boto3's own chain: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL for a non-AWS store); no config key holds one.
A wrong endpoint, a missing bucket or denied access raises one StorageError naming the URL and
what to do; a missing object is a FileNotFoundError (prepare rejects its record as missing_audio).
"""

import hashlib
import os
import posixpath
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sharflow.core.cache import cache_root
from sharflow.core.errors import SharflowError

SCHEMES = ("s3",)  # what boto3 serves; ais:// and others may be written into the hand-off (docs)
_CHUNK = 1 << 20


class StorageError(SharflowError):
    """The object store cannot be reached or refuses: names the URL and what to do."""


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
    return boto3.session.Session().client("s3", config=config)


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


@lru_cache(maxsize=65536)
def head(url: str) -> ObjectInfo:
    """Size and ETag of the object at `url` (one HEAD request per URL and process)."""
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
    return sorted(f"s3://{bucket}/{name}" for name in keys if name.endswith(suffix))


def object_cache() -> Path:
    """Where local copies of objects are kept: $SHARFLOW_OBJECT_CACHE, else sharflow's cache/objects."""
    return Path(os.environ.get("SHARFLOW_OBJECT_CACHE") or cache_root() / "objects")


def local_file(path: str) -> str:
    """A local file holding the bytes at `path`: `path` itself, or for a URL its copy in the object
    cache, downloaded (whole, once per object version) when not there yet.

    The one way every stage opens audio and manifests. The copy is written under a temp name and
    renamed when complete, so jobs that fetch one object at once never see half a file; the GET
    asks for the ETag the HEAD saw (If-Match), so an object replaced meanwhile fails, not mixes.
    """
    if not is_url(path):
        return path
    info = head(path)
    bucket, key = split_url(path)
    digest = hashlib.sha256(path.encode()).hexdigest()
    suffix = posixpath.splitext(key)[1][:16]
    target = object_cache() / bucket / digest[:2] / f"{digest[2:24]}-{info.etag[:40]}{suffix}"
    if target.is_file() and target.stat().st_size == info.size:
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                body = client().get_object(Bucket=bucket, Key=key, IfMatch=f'"{info.etag}"')["Body"]
                for chunk in body.iter_chunks(_CHUNK):
                    out.write(chunk)
            except Exception as e:
                raise storage_error(path, e) from e
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return str(target)


class RequestCount:
    """Counts the requests this process's client sends while the block runs (`with RequestCount() as n`,
    then `n.total` and `n.by_operation`): what publishing costs, in its stats and benchmark."""

    def __init__(self):
        self.total = 0
        self.by_operation: dict[str, int] = {}

    def _count(self, event_name: str = "", **_):
        self.total += 1  # every attempt: a retried request counts each time it is sent
        name = event_name.rsplit(".", 1)[-1]
        self.by_operation[name] = self.by_operation.get(name, 0) + 1

    def __enter__(self) -> "RequestCount":
        client().meta.events.register("before-send.s3", self._count)
        return self

    def __exit__(self, *exc) -> None:
        client().meta.events.unregister("before-send.s3", self._count)
