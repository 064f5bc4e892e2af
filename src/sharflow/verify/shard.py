"""Verify one shard: every field's file opens, its members pair up with the cuts in order, audio
decodes to what its manifest declares, codes have the shape, range and frame_shift of their codec.

Runs in worker processes; never raises on bad data: every problem is returned, named by dataset,
field, shard, cut and file.
"""

import io
import json
import math
import tarfile
from dataclasses import dataclass

import numpy as np

from sharflow.codes.batches import code_frames
from sharflow.core.shar_fields import AUDIO_FIELDS, codes_fields, open_cuts
from sharflow.core.shar_index import index_problem
from sharflow.io.audio import compute_num_samples

AUDIO_LABELS = tuple(f.label for f in AUDIO_FIELDS)  # target_codes are of target_audio, context of context
MAX_PROBLEMS_PER_SHARD = 20


@dataclass(frozen=True)
class CodecInfo:
    """What a codec's codes must look like, from its codes stats."""

    name: str
    sample_rate: int
    samples_per_frame: int
    num_codebooks: int
    codebook_size: int

    @property
    def frame_shift(self) -> float:
        return self.samples_per_frame / self.sample_rate


@dataclass(frozen=True)
class ShardCheck:
    """Inputs of one shard's check (sent to a worker process)."""

    dataset: str
    shard: int
    paths: dict[str, str]  # field label -> file
    codecs: tuple[CodecInfo, ...]
    indexed: bool = False  # every file has its index beside it (shar.index)


class _Problems:
    def __init__(self, check: ShardCheck):
        self.check = check
        self.items: list[str] = []

    def add(self, label: str, message: str, cut: str | None = None) -> None:
        if len(self.items) < MAX_PROBLEMS_PER_SHARD:
            where = f"dataset {self.check.dataset}, field {label}, shard {self.check.shard}"
            if cut is not None:
                where += f", cut {cut}"
            self.items.append(f"{where}: {message} ({self.check.paths[label]})")


def _read_cuts(path: str) -> list[dict]:
    with open_cuts(path) as f:
        return [json.loads(line) for line in f]


def _check_indexes(problems: _Problems, check: ShardCheck) -> int:
    """Each file's index against the file (sharflow.core.shar_index); the number that match."""
    whole = 0
    for label, path in check.paths.items():
        problem = index_problem(path)
        if problem is None:
            whole += 1
        else:
            problems.add(label, f"index: {problem}; lhotse would read other bytes than the cut's")
    return whole


def _tar_pairs(tar: tarfile.TarFile) -> list[tuple[tarfile.TarInfo, tarfile.TarInfo]]:
    members = tar.getmembers()
    if len(members) % 2:
        raise ValueError(f"{len(members)} members: data and manifest do not pair up")
    return list(zip(members[0::2], members[1::2], strict=True))


def _check_ids(problems: _Problems, label: str, pairs, ids: list[str]) -> bool:
    """Member names `<id>.<ext>` + `<id>.json` in the cuts' order; False stops this field's checks."""
    names = []
    for data, meta in pairs:
        key = meta.name[: -len(".json")] if meta.name.endswith(".json") else None
        if key is None or data.name.rsplit(".", 1)[0] != key:
            problems.add(label, f"members {data.name!r}, {meta.name!r} are not a (data, .json manifest) pair")
            return False
        names.append(key)
    if len(names) != len(ids):
        problems.add(label, f"{len(names)} entries but the cuts file has {len(ids)}")
    for i, (found, expected) in enumerate(zip(names, ids, strict=True)):
        if found != expected:
            problems.add(label, f"entry {i} is {found!r}: ids are out of order with the cuts file", expected)
            return False
    return len(names) == len(ids)


def _check_audio(problems, label, tar, pairs, cuts) -> list[tuple[int, int]]:
    """Decode every member; returns (num_samples, sampling_rate) per cut from the manifests."""
    import soundfile as sf

    lengths = []
    for (data, meta), cut in zip(pairs, cuts, strict=True):
        cid = cut["id"]
        try:
            manifest = json.loads(tar.extractfile(meta).read())
            declared, rate = int(manifest["num_samples"]), int(manifest["sampling_rate"])
        except Exception as e:
            problems.add(label, f"manifest does not read ({e})", cid)
            lengths.append((0, 0))
            continue
        lengths.append((declared, rate))
        try:
            samples, decoded_rate = sf.read(
                io.BytesIO(tar.extractfile(data).read()), dtype="int16", always_2d=True
            )
        except Exception as e:
            problems.add(label, f"audio does not decode ({type(e).__name__}: {e})", cid)
            continue
        if decoded_rate != rate or len(samples) != declared:
            problems.add(
                label,
                f"decodes to {len(samples)} samples at {decoded_rate} Hz, manifest declares "
                f"{declared} at {rate} Hz",
                cid,
            )
        duration = (
            cut["duration"]
            if label == "target_audio"
            else cut["supervisions"][0]["custom"]["context_audio_duration"]
        )
        if declared != compute_num_samples(duration, rate):
            problems.add(label, f"{declared} samples at {rate} Hz but the cut says {duration} s", cid)
    return lengths


def _check_codes(
    problems, label, tar, pairs, ids, codec: CodecInfo, audio_lengths
) -> tuple[list[int], list[int]]:
    """Shapes, dtype, range and frame_shift of every codes member.

    Returns the frames of every cut (-1 where the codes do not load) and the codebooks that hold
    one value in every frame of the shard.
    """
    frames: list[int] = []
    low = np.full(codec.num_codebooks, np.iinfo(np.int64).max)
    high = np.full(codec.num_codebooks, np.iinfo(np.int64).min)
    for (data, meta), cid, (samples, rate) in zip(pairs, ids, audio_lengths, strict=True):
        try:
            manifest = json.loads(tar.extractfile(meta).read())
            codes = np.load(io.BytesIO(tar.extractfile(data).read()), allow_pickle=False)
        except Exception as e:
            problems.add(label, f"codes do not load ({type(e).__name__}: {e})", cid)
            frames.append(-1)
            continue
        frames.append(int(codes.shape[-1]) if codes.ndim else 0)
        if not rate:
            continue  # its audio manifest was already reported
        expected = (
            codec.num_codebooks,
            code_frames(samples, rate, codec.sample_rate, codec.samples_per_frame),
        )
        if codes.shape != expected:
            problems.add(
                label,
                f"codes shape {codes.shape}, expected {expected} for {samples} samples at {rate} Hz",
                cid,
            )
        elif not np.issubdtype(codes.dtype, np.integer):
            problems.add(label, f"codes dtype {codes.dtype} is not an integer type", cid)
        elif codes.size and (codes.min() < 0 or codes.max() >= codec.codebook_size):
            problems.add(label, f"codes outside [0, {codec.codebook_size})", cid)
        elif codes.size:
            low, high = np.minimum(low, codes.min(axis=1)), np.maximum(high, codes.max(axis=1))
        shape = manifest.get("array", {}).get("shape")
        if shape != list(codes.shape):
            problems.add(label, f"manifest shape {shape} differs from the array's {list(codes.shape)}", cid)
        if not math.isclose(manifest.get("frame_shift", -1.0), codec.frame_shift, rel_tol=1e-9):
            problems.add(label, f"frame_shift {manifest.get('frame_shift')} != {codec.frame_shift}", cid)
    return frames, [k for k in range(codec.num_codebooks) if low[k] == high[k]]


def verify_shard(check: ShardCheck) -> dict:
    """Every field of one shard; returns counts and the problems found (never raises on bad data)."""
    problems = _Problems(check)
    result = {
        "shard": check.shard,
        "cuts": 0,
        "target_seconds": 0.0,
        "context_seconds": 0.0,
        "ids": [],
        "frames": {},
        "cut_frames": {},
        "constant_codebooks": {},
        "indexes": 0,
        "problems": problems.items,
    }
    if check.indexed:
        result["indexes"] = _check_indexes(problems, check)
    try:
        cuts = _read_cuts(check.paths["cuts"])
    except Exception as e:
        problems.add("cuts", f"cuts file does not read ({type(e).__name__}: {e})")
        return result
    ids = [c["id"] for c in cuts]
    result["ids"] = ids
    result["cuts"] = len(cuts)
    result["target_seconds"] = sum(c["duration"] for c in cuts)
    result["context_seconds"] = sum(c["supervisions"][0]["custom"]["context_audio_duration"] for c in cuts)
    audio_lengths: dict[str, list[tuple[int, int]]] = {}
    for label in AUDIO_LABELS:
        try:
            with tarfile.open(check.paths[label], "r:") as tar:
                pairs = _tar_pairs(tar)
                if _check_ids(problems, label, pairs, ids):
                    audio_lengths[label] = _check_audio(problems, label, tar, pairs, cuts)
        except Exception as e:
            problems.add(label, f"tar does not read ({type(e).__name__}: {e})")
    for codec in check.codecs:
        for field, audio_label in zip(codes_fields(codec.name), AUDIO_LABELS, strict=True):
            label = field.label
            try:
                with tarfile.open(check.paths[label], "r:") as tar:
                    pairs = _tar_pairs(tar)
                    if _check_ids(problems, label, pairs, ids) and audio_label in audio_lengths:
                        frames, constant = _check_codes(
                            problems, label, tar, pairs, ids, codec, audio_lengths[audio_label]
                        )
                        result["frames"][label] = sum(f for f in frames if f > 0)
                        result["cut_frames"][label] = frames
                        if constant and result["frames"][label]:
                            result["constant_codebooks"][label] = constant
            except Exception as e:
                problems.add(label, f"tar does not read ({type(e).__name__}: {e})")
    return result


def codec_info(name: str, codes_stats: dict) -> CodecInfo:
    return CodecInfo(
        name,
        int(codes_stats["sample_rate"]),
        int(codes_stats["samples_per_frame"]),
        int(codes_stats["num_codebooks"]),
        int(codes_stats["codebook_size"]),
    )
