"""Files as objects: the ETag a store gives a file uploaded in fixed parts, one upload.

S3 (and moto, MinIO, AIStore's S3 API) gives an object put in one request the MD5 of its bytes as
ETag, and one uploaded in parts the MD5 of its parts' MD5s followed by `-<parts>`. With a fixed part
size, the ETag a file will have is known before it is uploaded: a listing (one request per 1,000
objects) then tells which files are there already, byte for byte, with no request per object.
A store that encrypts with KMS gives other ETags; the last run's record keeps the ETag each
upload got, so such a store is recognized too (sharflow.publish.job).
"""

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from sharflow.io import storage

MIB = 1 << 20
_READ = 8 * MIB


@dataclass(frozen=True)
class FileDigest:
    """What is published of a file: its bytes, its ETag uploaded in `part_size` parts, its SHA-256."""

    size: int
    etag: str
    sha256: str


def file_digest(path: str, part_size: int) -> FileDigest:
    """Size, expected ETag and SHA-256 of a file, in one read."""
    sha, whole, parts = hashlib.sha256(), hashlib.md5(usedforsecurity=False), []
    part, in_part, size = hashlib.md5(usedforsecurity=False), 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(min(_READ, part_size - in_part)):
            sha.update(chunk)
            whole.update(chunk)
            part.update(chunk)
            size, in_part = size + len(chunk), in_part + len(chunk)
            if in_part == part_size:
                parts.append(part.digest())
                part, in_part = hashlib.md5(usedforsecurity=False), 0
    if in_part:
        parts.append(part.digest())
    if size < part_size:  # one PUT
        etag = whole.hexdigest()
    else:
        etag = f"{hashlib.md5(b''.join(parts), usedforsecurity=False).hexdigest()}-{len(parts)}"
    return FileDigest(size, etag, sha.hexdigest())


def abort_unfinished(bucket: str, prefix: str, keys: set[str]) -> int:
    """Abort the multipart uploads to `keys` (listed under `prefix`) that a killed run left open; how
    many. An upload to any other key is another writer's, in flight or not: it is left alone."""
    client, count = storage.client(), 0
    for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=prefix):
        for upload in page.get("Uploads", ()):
            if upload["Key"] in keys:
                client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                count += 1
    return count


def _parts(path: str, part_size: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(part_size):
            yield chunk


def upload(path: str, bucket: str, key: str, digest: FileDigest, part_size: int) -> str:
    """Upload a file as one object (one PUT, or a multipart upload in `part_size` parts); its ETag.

    The object's metadata carries the file's SHA-256. A multipart upload that fails is aborted; one
    whose process is killed is aborted by the next run (abort_unfinished)."""
    client, meta = storage.client(), {"sha256": digest.sha256}
    if digest.size < part_size:
        with open(path, "rb") as f:
            return client.put_object(Bucket=bucket, Key=key, Body=f, Metadata=meta)["ETag"].strip('"')
    upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, Metadata=meta)["UploadId"]
    try:
        done = [
            {
                "PartNumber": n,
                "ETag": client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=data
                )["ETag"],
            }
            for n, data in enumerate(_parts(path, part_size), start=1)
        ]
        reply = client.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
        )
    except BaseException:
        with contextlib.suppress(Exception):  # the upload's own error is the one to report
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        raise
    return reply["ETag"].strip('"')
