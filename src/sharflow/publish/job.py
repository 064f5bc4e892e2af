"""The publish job: upload a finished run's verified Shar sets and hand-off files, the record last.

Every stage writes to the working folder as before (atomic renames, completion records, a small
DAG); publishing is one job after verification. Each file goes to `<url>/<its path under the
working folder>` (results/demo/shar/cuts/cuts.000000.jsonl, its index cuts.000000.jsonl.idx,
results/input_cfg.yaml, ...), the paths `training.path_prefix` (by default the publish URL) writes
into input_cfg, validation_ds and the evaluation sets. The job:

1. lists what is under the URL (one request per 1,000 objects) and aborts the multipart uploads a
   killed run left open to the keys it publishes (never another writer's: the URL's prefix is a
   folder, `s3://b/emilia` means `emilia/`, and only the run's own keys are aborted under it);
2. uploads each file whose object is missing or differs: the ETag a file will have is computed
   from its bytes (sharflow.publish.objects), so an object that is there byte for byte is not sent
   again, and a file whose size and time are the last run's keeps its digests (no read);
3. deletes the record first when anything is uploaded (a reader that finds the record finds every
   object it lists, as listed) and writes `<url>/sharflow_published.json` last: every object's
   size, ETag and SHA-256.

The local copy of the record (the rule's `update()` output, with each file's size and mtime) is
how the next run skips reading unchanged files. A run killed at any point leaves objects that are
complete or absent (a PUT is atomic; an unfinished multipart upload is invisible and aborted next
time) and no record: the rerun uploads what is missing and then the record.
"""

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tqdm import tqdm

from sharflow.core import blocks, layout, shar_fields
from sharflow.core.atomic import read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.io import storage
from sharflow.io.storage import listing
from sharflow.publish.objects import MIB, FileDigest, abort_unfinished, file_digest, upload

log = logging.getLogger(__name__)

RECORD = "sharflow_published.json"
FORMAT = 1


@dataclass(frozen=True)
class PublishSettings:
    """The `publish` config block."""

    url: str
    part_mb: int = 64
    workers: int = 8

    @property
    def part_size(self) -> int:
        return self.part_mb * MIB


def published_files(
    datasets: list[str], held_out: list[str], codecs: list[str], extras: list[str]
) -> list[str]:
    """Every file a run publishes, as paths under the working folder, in a fixed order.

    Per Shar set (its results folder: `datasets`, then the `held_out` split sets): each field's
    shard files that its plan promises, each with its index in an indexed set, and its verification
    record; a dataset's catalog, bucket bins and card; a test set's evaluation export; then `extras`
    (the hand-off files)."""
    out = []
    for folder in [*datasets, *held_out]:
        files = layout.DatasetFiles(folder).as_planned()
        shards = blocks.planned_shards(files.shard_plan)
        for field in shar_fields.fields(codecs, files.indexed):
            out += shar_fields.shard_files(files.shar_dir, field, shards, files.indexed)
        out.append(files.verify)
        if folder in datasets:
            out += [files.catalog, files.buckets, files.dataset_card]
        if os.path.isdir(files.evaluation):
            out += sorted(
                os.path.join(root, name) for root, _, names in os.walk(files.evaluation) for name in names
            )
    return [os.path.normpath(p) for p in out + list(extras)]


def publish(settings: PublishSettings, files: list[str], out: str) -> dict:
    """Publish `files` (paths under the working folder) under `settings.url`; write the local record
    to `out` (read first: the last run's digests); return the stats."""
    target = _Target(settings.url)
    refuse_escapes(files)
    last = _last_record(out, settings.part_size)
    with storage.RequestCount() as requests:
        remote = target.call(listing, target.bucket, target.key(""))
        ours = {target.key(f) for f in files}
        aborted = target.call(abort_unfinished, target.bucket, target.key(""), ours)
        digests = _digests(files, last)
        todo = [
            f for f in files if not _is_there(remote.get(target.key(f)), digests[f], last["objects"].get(f))
        ]
        sending = set(todo)
        etags = {f: digests[f].etag if f in sending else remote[target.key(f)][1] for f in files}
        if todo and target.key(RECORD) in remote:  # the set changes: no record while it does
            target.call(storage.client().delete_object, Bucket=target.bucket, Key=target.key(RECORD))
        etags.update(_upload_all(settings, target, todo, digests))
        objects = {f: {"size": digests[f].size, "etag": etags[f], "sha256": digests[f].sha256} for f in files}
        record = {"format": FORMAT, "url": settings.url, "objects": objects}
        body = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
        if todo or remote.get(target.key(RECORD)) != (len(body), _md5(body)):
            target.call(
                storage.client().put_object,
                Bucket=target.bucket,
                Key=target.key(RECORD),
                Body=body,
                ContentType="application/json",
            )
    stats = {
        "url": settings.url,
        "files": len(files),
        "uploaded": len(todo),
        "uploaded_bytes": sum(digests[f].size for f in todo),
        "already_there": len(files) - len(todo),
        "aborted_multipart": aborted,
        "requests": requests.total,
        "requests_by_operation": dict(sorted(requests.by_operation.items())),
    }
    local = {
        "part_size": settings.part_size,
        "digests": {f: [*_stamp(f), digests[f].etag, digests[f].sha256] for f in files},
        "stats": stats,
    }
    write_json(out, {**record, "record": target.url(RECORD), **local})
    log.info(
        "published %d file(s) under %s: %d uploaded (%.1f MB), %d already there; %d requests",
        len(files),
        settings.url,
        len(todo),
        stats["uploaded_bytes"] / 1e6,
        stats["already_there"],
        requests.total,
    )
    return stats


class _Target:
    """The bucket and key prefix published under; requests whose errors say what to do."""

    def __init__(self, url: str):
        self.root = url.rstrip("/")
        self.bucket, base = storage.split_url(url)
        self.base = base.strip("/")

    def key(self, rel: str) -> str:
        return f"{self.base}/{rel}" if self.base else rel

    def url(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (OSError, SharflowError):
            raise
        except Exception as e:
            raise storage.storage_error(self.root, e) from e


def refuse_escapes(files: list[str]) -> None:
    """SharflowError for a file whose real place leaves its top folder under the working folder (a
    symlink in `results/` to a file elsewhere): publish uploads the run's own files only. A top folder
    that is itself a symlink (results/ on scratch) is the run's."""
    tops: dict[str, str] = {}  # a top folder's real place, resolved once for all its files
    for f in files:
        if os.path.isabs(f):
            raise SharflowError(
                f"{f}: listed for publishing by an absolute path; publish takes paths under the run"
            )
        top = os.path.normpath(f).split(os.sep, 1)[0]
        if top not in tops:
            tops[top] = os.path.join(os.path.realpath(top), "")
        real = os.path.realpath(f)
        if not real.startswith(tops[top]):
            raise SharflowError(
                f"{f}: listed for publishing but it is {real}, outside the run's {top}/ (a symlink?); "
                "publish uploads only the run's own files: put the file itself there or remove it"
            )


def _md5(body: bytes) -> str:
    return hashlib.md5(body, usedforsecurity=False).hexdigest()


def _last_record(out: str, part_size: int) -> dict:
    """The last run's local record, or an empty one (none yet, another format or part size)."""
    try:
        last = read_json(out)
    except (OSError, ValueError):
        last = {}
    if last.get("format") != FORMAT or last.get("part_size") != part_size:
        return {"objects": {}, "digests": {}, "part_size": part_size}
    return last


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _digests(files: list[str], last: dict) -> dict[str, FileDigest]:
    """Each file's digest: the last run's where its size and mtime are unchanged, else read."""
    out = {}
    for f in tqdm(files, desc="digest", unit="file", mininterval=5):
        if not os.path.isfile(f):
            raise SharflowError(f"{f}: listed for publishing but missing; rerun the workflow to make it")
        old = last["digests"].get(f)  # [size, mtime_ns, computed ETag, sha256]
        if old and old[:2] == list(_stamp(f)):
            out[f] = FileDigest(old[0], old[2], old[3])
        else:
            out[f] = file_digest(f, last["part_size"])
    return out


def _is_there(remote: tuple[int, str] | None, digest: FileDigest, last: dict | None) -> bool:
    """Whether the object is this file: the ETag its bytes give, or the one the store gave the same
    bytes last time (a store whose ETags are not MD5s)."""
    if remote is None or remote[0] != digest.size:
        return False
    return remote[1] == digest.etag or bool(
        last and last["sha256"] == digest.sha256 and last["etag"] == remote[1]
    )


def _upload_all(settings: PublishSettings, target: _Target, todo: list[str], digests) -> dict[str, str]:
    """Upload `todo`, `settings.workers` at once; {file: the ETag the store gave it}."""

    def one(f: str) -> tuple[str, str]:
        return f, target.call(upload, f, target.bucket, target.key(f), digests[f], settings.part_size)

    with ThreadPoolExecutor(settings.workers) as pool:
        done = tqdm(pool.map(one, todo), total=len(todo), desc="publish", unit="file", mininterval=5)
        return dict(done)
