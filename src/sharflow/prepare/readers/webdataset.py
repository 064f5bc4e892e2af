"""WebDataset shards in: tars of samples grouped by key, `<key>.<audio ext>` + `<key>.json`, as Emilia
ships them, read where they lie.

Each sample becomes one record in the form of a NeMo manifest line, so that prepare's one set of
checks (sharflow.prepare.manifest.check_line) gives it the same prepared records and reject reasons:
its `audio_filepath` addresses the audio member inside its tar (`EN-B000000.tar#<key>.mp3`,
sharflow.io.containers: every stage reads it there, nothing is extracted), and its fields come
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

import hashlib
import json
import os
import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sharflow.core.errors import SharflowError
from sharflow.io import containers, storage
from sharflow.io.audio import AudioInfo, probe_bytes
from sharflow.prepare.manifest import Probed, Refused
from sharflow.prepare.readers.common import Mapping, Source, container_files

CHUNK_RECORDS = 2048
AUDIO_EXTENSIONS = ("flac", "wav", "mp3", "ogg", "opus")


@dataclass(frozen=True)
class WebDatasetShards:
    """A dataset's WebDataset tars as prepare reads them: `tars` in order, addressed in the records
    relative to where they lie (`audio_root`-relative paths pass prepare's root check)."""

    tars: tuple
    mapping: Mapping = field(default_factory=Mapping)

    format = "webdataset"
    unit = "sample"
    first = 1

    @classmethod
    def open(cls, source: Source) -> "WebDatasetShards":
        return cls(container_files(source, containers.TAR, "WebDataset tar"), source.mapping)

    def most_records(self) -> int | None:
        """The samples of the tars, from their headers (a 512-byte read per member); None where a tar
        is an object (it is not fetched to count) or not there."""
        keys = 0
        for tar in self.tars:
            if storage.is_url(tar) or not os.path.isfile(tar):
                return None
            try:
                with tarfile.open(tar, "r:") as archive:
                    keys += len({_split(info.name)[0] for info in archive if info.isfile()})
            except tarfile.TarError:
                return None
        return keys

    def size(self) -> tuple[int, str]:
        """(total, unit) for a progress bar: the bytes of the tars."""
        return sum(storage.size(t) for t in self.tars if storage.exists(t)), "B"

    def chunks(self, progress=None) -> Iterator[list[bytes | Probed | Refused]]:
        """Lists of at most CHUNK_RECORDS items, in order: a record line in NeMo form (Probed, with its
        audio's header, where the tar is an object read as a stream), or Refused."""
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

    def _samples(self, tar: str, seen: dict[int, str], progress=None) -> Iterator[bytes | Probed | Refused]:
        if not storage.exists(tar):
            raise SharflowError(f"WebDataset shard {tar} is not there; fix datasets.<name>.manifest")
        remote = storage.is_url(tar)
        # an object: one GET, read as a stream (never copied), its audio probed here as it goes by
        size = storage.size(tar)
        source = storage.ObjectStream(tar, storage.head(tar).etag) if remote else open(tar, "rb")  # noqa: SIM115
        group: _Sample | None = None
        members: dict[str, tuple[int, int]] = {}  # the tar's member index, kept (marked where cut)
        truncated = False
        with source:
            try:
                for info in tarfile.open(fileobj=source, mode="r:"):  # noqa: SIM115 (`source` is closed above)
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
                        truncated = True
                        break
                    if ext == "json":
                        group.json = (info.name, _member_bytes(source, info))
                    elif ext in AUDIO_EXTENSIONS and group.audio is None:
                        group.audio = info.name
                        if remote:
                            group.probed = _probe(_member_bytes(source, info))
            except tarfile.ReadError as e:
                if group is None:
                    group = _Sample("")
                group.truncated = group.truncated or f"after {group.key or 'the start'} ({e})"
                truncated = True
        containers.remember_tar_index(tar, members, truncated=truncated)
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
        line = json.dumps(record, ensure_ascii=False).encode("utf-8")
        if sample.probed is None:
            return line
        info, error = sample.probed
        return Probed(line, info, error)


@dataclass
class _Sample:
    key: str
    json: tuple | None = None  # (member name, bytes)
    audio: str | None = None
    truncated: str = ""
    probed: tuple | None = None  # (AudioInfo or None, error): the header of audio read from a stream


def _member_bytes(source, info: tarfile.TarInfo) -> bytes:
    """A member's data, read where the tar's reader stands: just past its header."""
    source.seek(info.offset_data)
    return source.read(info.size)


def _probe(data: bytes) -> tuple[AudioInfo | None, str]:
    """The header of an audio member as the stream passes it (prepare's checks then need not fetch it
    again): (AudioInfo, "") or (None, why it does not decode)."""
    try:
        return probe_bytes(data), ""
    except Exception as e:  # libsndfile reports corrupt and unknown files alike
        return None, str(e)


def _split(name: str) -> tuple[str, str]:
    """(key, extension) of a member: WebDataset's key is the name up to the first dot of its last part."""
    folder, base = posixpath.split(name)
    stem, _, ext = base.partition(".")
    return posixpath.join(folder, stem) if folder else stem, ext.lower()


def _escapes(key: str) -> bool:
    path = Path(key)
    return key.startswith("/") or ".." in path.parts
