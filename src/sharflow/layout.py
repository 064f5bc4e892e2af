"""Where a dataset's Shar fields live, and which shard files its plan promises.

results/<dataset>/shar/
    cuts/cuts.NNNNNN.jsonl.gz
    target_audio/recording.NNNNNN.tar      context_audio/recording.NNNNNN.tar
    codes_<codec>/target_codes/codes.NNNNNN.tar    codes_<codec>/context_codes/codes.NNNNNN.tar

Jobs after the shard jobs (buckets, verify, report, input_cfg) find the shard files from the plan
here instead of listing them as Snakemake inputs: only the merge jobs depend on the shar_plan
checkpoint, which keeps a 10,000-shard DAG quick to build (benchmarks/bench_dag.py).
"""

import json
from dataclasses import dataclass
from pathlib import Path

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

    def name(self, shard: int) -> str:
        return f"{self.prefix}.{shard:06d}{self.suffix}"


CUTS = Field("cuts", None, "cuts", "cuts", ".jsonl.gz")
AUDIO_FIELDS = (Field("target_audio", None, "target_audio", "recording", ".tar"),
                Field("context_audio", None, "context_audio", "recording", ".tar"))


def codes_fields(codec: str) -> tuple[Field, ...]:
    return tuple(Field(kind, codec, f"codes_{codec}/{kind}", "codes", ".tar") for kind in CODE_FIELDS)


def fields(codecs: list[str]) -> list[Field]:
    """Every field of a dataset with these codecs, in a fixed order."""
    return [CUTS, *AUDIO_FIELDS, *(f for codec in codecs for f in codes_fields(codec))]


def planned_shards(plan_path: str) -> int:
    with open(plan_path, encoding="utf-8") as f:
        return int(json.load(f)["num_shards"])


def shard_files(shar_dir: str, field: Field, num_shards: int) -> list[str]:
    return [str(Path(shar_dir) / field.folder / field.name(s)) for s in range(num_shards)]


def cut_files(shar_dir: str, plan_path: str) -> list[str]:
    """The cuts file of every shard the plan promises."""
    return shard_files(shar_dir, CUTS, planned_shards(plan_path))
