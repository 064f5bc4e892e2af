"""WebDataset shards in: tars of samples grouped by key, `<key>.<audio ext>` + `<key>.json`, as Emilia
ships them, read where they lie.

Each sample becomes one record in the form of a NeMo manifest line, so that prepare's one set of
checks (sharflow.prepare.manifest.check_line) gives it the same prepared records and reject reasons:
its `audio_filepath` addresses the audio member inside its tar (`EN-B000000.tar#<key>.mp3`,
sharflow.core.containers: every stage reads it there, nothing is extracted), and its fields come
from the JSON through the dataset's field mapping (`fields`: text, speaker, duration, language by
their names in the JSON; the other JSON fields ride along, or only those `extra_fields` lists).

A tar is read once, front to back (its headers and its JSON members; the audio members are skipped
over, their headers probed later by prepare's checks). A sample's members lie next to each other, as
WebDataset writes them; what is wrong with a sample is refused with its reason and the tar and member
named: a key with audio but no JSON (missing_metadata), JSON without audio (missing_audio), a JSON
that does not parse (malformed_json), a key seen before (duplicate_key, in any tar of the dataset:
one hash per key is kept), a member name that would leave its folder (path_escapes_root), the
tar's end cut off (truncated_container: the sample it cut, and the rest of that tar, which is not
there). Records are numbered by sample (1, 2, ... over the tars in order).
"""

import glob
import hashlib
import json
import os
import posixpath
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sharflow.core import containers, storage
from sharflow.core.errors import SharflowError
from sharflow.prepare.lhotse_io import LANGUAGE_CODE, RECORD_KEYS
from sharflow.prepare.manifest import Refused

CHUNK_RECORDS = 2048
AUDIO_EXTENSIONS = ("flac", "wav", "mp3", "ogg", "opus")
# the record fields a mapping names, and the JSON names they have by default (Emilia's)
MAPPED = {"text": "text", "speaker": "speaker", "duration": "duration", "language": "language"}
_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_shards(pattern: str, audio_root: str, suffix: str = ".tar") -> list[str]:
    """The files of `pattern`: a brace pattern (`EN-B{000000..000099}.tar`, WebDataset's), a folder
    (every file with `suffix` under it, sorted) or one file; relative to the audio root, absolute paths
    and URLs as given. Under an `s3://` root a name that does not end with `suffix` is a folder: every
    object below it with `suffix`, sorted (one listing request per 1,000 objects)."""
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


@dataclass(frozen=True)
class Mapping:
    """Where a sample's JSON keeps each record field, and which of its other fields ride along (None:
    all of them)."""

    fields: dict = field(default_factory=dict)
    extra_fields: tuple | None = None

    def record(self, metadata: dict) -> dict:
        names = {**MAPPED, **self.fields}
        record = {}
        for ours in ("text", "speaker", "duration"):
            if metadata.get(names[ours]) is not None:
                record[ours] = metadata[names[ours]]
        language = metadata.get(names["language"])
        if isinstance(language, str) and LANGUAGE_CODE.match(language):
            record["lang"] = language
        taken = set(names.values()) | {self.fields.get("audio", "audio")}
        extra = (
            metadata
            if self.extra_fields is None
            else {k: metadata[k] for k in self.extra_fields if k in metadata}
        )
        record.update({k: v for k, v in extra.items() if k not in taken and k not in RECORD_KEYS})
        return record


@dataclass(frozen=True)
class WebDatasetShards:
    """A dataset's WebDataset tars as prepare reads them: `tars` in order, addressed in the records
    relative to where they lie (`audio_root`-relative paths pass prepare's root check)."""

    tars: tuple
    mapping: Mapping = Mapping()

    format = "webdataset"
    unit = "sample"
    first = 1

    def size(self) -> tuple[int, str]:
        """(total, unit) for a progress bar: the bytes of the tars."""
        return sum(storage.size(t) for t in self.tars if storage.exists(t)), "B"

    def chunks(self, progress=None) -> Iterator[list[bytes | Refused]]:
        """Lists of at most CHUNK_RECORDS items, in order: a record line in NeMo form, or Refused."""
        seen: dict[int, str] = {}
        chunk: list[bytes | Refused] = []
        for tar in self.tars:
            for item in self._samples(tar, seen, progress):
                chunk.append(item)
                if len(chunk) == CHUNK_RECORDS:
                    yield chunk
                    chunk = []
        if chunk:
            yield chunk

    def _samples(self, tar: str, seen: dict[int, str], progress=None) -> Iterator[bytes | Refused]:
        if not storage.exists(tar):
            raise SharflowError(f"WebDataset shard {tar} is not there; fix datasets.<name>.manifest")
        local = storage.local_file(tar)  # an object: fetched whole into the object cache, once
        size = os.path.getsize(local)
        group: _Sample | None = None
        members: dict[str, tuple[int, int]] | None = {}  # the tar's member index, kept when whole
        try:
            with tarfile.open(local, "r:") as archive:
                for info in archive:
                    containers.add_member(members, info, size)
                    if not info.isfile():
                        continue
                    key, ext = _split(info.name)
                    if group is not None and key != group.key:
                        yield self._record(tar, group, seen)
                        group = None
                    group = group or _Sample(key)
                    if info.offset_data + info.size > size:
                        group.truncated = info.name
                        members = None
                        break
                    if ext == "json":
                        group.json = (info.name, archive.extractfile(info).read())
                    elif ext in AUDIO_EXTENSIONS and group.audio is None:
                        group.audio = info.name
        except tarfile.ReadError as e:
            if group is None:
                group = _Sample("")
            group.truncated = group.truncated or f"after {group.key or 'the start'} ({e})"
            members = None
        if members is not None:
            containers.remember_tar_index(local, members)
        if group is not None:
            yield self._record(tar, group, seen)
        if progress is not None:
            progress.update(size)

    def _record(self, tar: str, sample: "_Sample", seen: dict[int, str]) -> bytes | Refused:
        named = f"{tar}, sample {sample.key!r}"
        original = json.dumps(
            {"tar": tar, "key": sample.key, "json": sample.json and sample.json[0]}
        ).encode()
        if sample.truncated:
            return Refused(
                "truncated_container", f"{named}: the tar ends inside {sample.truncated}", original
            )
        if _escapes(sample.key):
            return Refused("path_escapes_root", f"{named}: a member name that leaves its folder", original)
        digest = int.from_bytes(hashlib.blake2b(sample.key.encode(), digest_size=8).digest(), "little")
        if digest in seen:
            return Refused("duplicate_key", f"{named}: the key is in {seen[digest]} already", original)
        seen[digest] = tar
        if sample.json is None:
            return Refused("missing_metadata", f"{named}: audio member {sample.audio} has no .json", original)
        try:
            metadata = json.loads(sample.json[1])
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return Refused("malformed_json", f"{named}: {sample.json[0]}: {e}", sample.json[1])
        if not isinstance(metadata, dict):
            return Refused("not_an_object", f"{named}: {sample.json[0]} is not a JSON object", sample.json[1])
        if sample.audio is None:
            detail = f"{named}: {sample.json[0]} has no audio member ({', '.join(AUDIO_EXTENSIONS)})"
            return Refused("missing_audio", detail, sample.json[1])
        record = {"audio_filepath": containers.address(tar, sample.audio), **self.mapping.record(metadata)}
        return json.dumps(record, ensure_ascii=False).encode("utf-8")


@dataclass
class _Sample:
    key: str
    json: tuple | None = None  # (member name, bytes)
    audio: str | None = None
    truncated: str = ""


def _split(name: str) -> tuple[str, str]:
    """(key, extension) of a member: WebDataset's key is the name up to the first dot of its last part."""
    folder, base = posixpath.split(name)
    stem, _, ext = base.partition(".")
    return posixpath.join(folder, stem) if folder else stem, ext.lower()


def _escapes(key: str) -> bool:
    path = Path(key)
    return key.startswith("/") or ".." in path.parts
