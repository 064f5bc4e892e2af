"""The fields of a Shar set: cuts, target and context audio, each codec's target and context codes,
with their folders and shard file names (NeMo's nested layout: docs FORMAT). An indexed set
(`shar.index`, the default) has uncompressed cuts files and an index beside every file
(sharflow.core.shar_index); an unindexed one gzipped cuts and no index."""

import gzip
from dataclasses import dataclass
from pathlib import Path

from sharflow.core.blocks import shard_key
from sharflow.core.shar_index import index_path

CODE_FIELDS = ("target_codes", "context_codes")


@dataclass(frozen=True)
class Field:
    """One Shar field of a dataset: its folder (relative to the shar dir) and shard file names."""

    field: str  # cuts, target_audio, context_audio, target_codes, context_codes
    codec: str | None
    folder: str
    prefix: str
    suffix: str

    @property
    def label(self) -> str:
        return f"{self.field}[{self.codec}]" if self.codec else self.field

    def name(self, shard: int | str) -> str:
        return f"{self.prefix}.{shard_key(shard)}{self.suffix}"


CUTS = Field("cuts", None, "cuts", "cuts", ".jsonl")  # indexed
CUTS_GZ = Field("cuts", None, "cuts", "cuts", ".jsonl.gz")  # shar.index: false


def cuts_field(indexed: bool) -> Field:
    return CUTS if indexed else CUTS_GZ


AUDIO_FIELDS = (
    Field("target_audio", None, "target_audio", "recording", ".tar"),
    Field("context_audio", None, "context_audio", "recording", ".tar"),
)


def codes_fields(codec: str) -> tuple[Field, ...]:
    return tuple(Field(kind, codec, f"codes_{codec}/{kind}", "codes", ".tar") for kind in CODE_FIELDS)


def fields(codecs: list[str], indexed: bool = True) -> list[Field]:
    """Every field of a dataset with these codecs, in a fixed order."""
    return [cuts_field(indexed), *AUDIO_FIELDS, *(f for codec in codecs for f in codes_fields(codec))]


def shard_files(shar_dir: str, field: Field, shards: list[int], indexed: bool = False) -> list[str]:
    """The field's file of each shard, each followed by its index when `indexed`."""
    files = [str(Path(shar_dir) / field.folder / field.name(s)) for s in shards]
    return [f for path in files for f in (path, index_path(path))] if indexed else files


def open_cuts(path: str):
    """A Shar cuts file (.jsonl.gz, or an indexed set's plain .jsonl) opened for reading text."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")
