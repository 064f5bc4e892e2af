"""Verify: open every shard of every Shar field of a dataset and prove the dataset is whole.

Checked, per shard (in worker processes, `verify.workers`):
- every field has the shard's file, and it opens (gzip JSONL for cuts, tar for the others);
- every tar holds (data, json manifest) pairs named after the cut ids, in the cuts' order;
- every audio member decodes to exactly the sample count and rate its manifest declares, and the
  target (context) audio is as long as the cut's duration (context_audio_duration);
- every codes member is a (num_codebooks, ceil(samples / samples_per_frame)) integer array with
  codes below the codebook size, its manifest's shape and frame_shift = samples_per_frame /
  sample_rate, samples being its audio's length at the codec's rate.
Per dataset: shard count equals the plan for every field, no stray file in a field directory, and
totals equal the shar and codes stage stats. Every problem names dataset, field, shard and cut; all
are logged, and the job fails without writing verify.json.
Not a failure, but warned about and counted per field in verify.json: a codes shard in which a
codebook holds one value in every frame (an untrained codec, a wrong checkpoint or precision).
"""

import gzip
import io
import json
import logging
import math
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sharflow.codes.batches import code_frames
from sharflow.core.atomic import read_json, write_json
from sharflow.core.audio import compute_num_samples
from sharflow.core.errors import SharflowError
from sharflow.core.layout import AUDIO_FIELDS, Field, codes_fields, fields, planned_shards
from sharflow.core.parallel import ordered_map, resolve_workers

log = logging.getLogger(__name__)

AUDIO_LABELS = tuple(f.label for f in AUDIO_FIELDS)  # target_codes are of target_audio, context of context
MAX_PROBLEMS_PER_SHARD = 20
MAX_PROBLEMS_SHOWN = 10


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
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


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
        "problems": problems.items,
    }
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


class CatalogCheck:
    """Walks the catalog along the shards' results: same ids in shard order, shard and position
    columns, and codes frames per cut equal to the codes themselves. Reads a batch at a time."""

    def __init__(self, dataset: str, path: str, codecs: tuple[CodecInfo, ...]):
        from sharflow.dataset.catalog import column_names, iter_batches

        self.dataset, self.path = dataset, path
        self.frames = {}  # codes field label -> catalog column
        for codec in codecs:
            target, context = codes_fields(codec.name)
            self.frames[target.label] = f"frames_{codec.name}"
            self.frames[context.label] = f"context_frames_{codec.name}"
        self.columns = ["cut_id", "shard", "position", *self.frames.values()]
        self.problems: list[str] = []
        missing = [c for c in self.columns if c not in column_names(path)]
        if missing:
            self.problems.append(f"dataset {dataset}, catalog {path}: no column(s) {', '.join(missing)}")
            self.columns = [c for c in self.columns if c not in missing]
        self._batches = iter_batches(path, self.columns)
        self._buffer: dict[str, list] = {c: [] for c in self.columns}
        self._at = 0
        self.rows = 0

    def _next_shard(self) -> int | None:
        """The shard column of the next row, loading a batch when the buffer is used up."""
        while self._at >= len(self._buffer["cut_id"]):
            batch = next(self._batches, None)
            if batch is None:
                return None
            self._buffer, self._at = batch.to_pydict(), 0
        return self._buffer["shard"][self._at] if "shard" in self._buffer else None

    def _take_shard(self, shard: int) -> dict[str, list]:
        """The consecutive rows whose shard column is `shard` (none if the next row is another's)."""
        out: dict[str, list] = {c: [] for c in self.columns}
        while self._next_shard() == shard:
            end = self._at
            column = self._buffer["shard"]
            while end < len(column) and column[end] == shard:
                end += 1
            for c in self.columns:
                out[c] += self._buffer[c][self._at : end]
            self._at = end
        self.rows += len(out["cut_id"])
        return out

    def shard(self, result: dict) -> None:
        """Compare the catalog's rows of one shard with that shard's verify result.

        A shard whose files have problems has its rows passed over, unchecked: its problems are
        already reported, and the next shard's rows still line up.
        """
        shard, ids = result["shard"], result["ids"]
        rows = self._take_shard(shard)
        if result["problems"]:
            return
        where = f"dataset {self.dataset}, catalog {self.path}, shard {shard}"
        if rows["cut_id"] != ids:
            got = len(rows["cut_id"])
            pairs = zip(rows["cut_id"], ids, strict=False)
            first = next((i for i, (a, b) in enumerate(pairs) if a != b), min(got, len(ids)))
            found = rows["cut_id"][first] if first < got else "no row"
            expected = ids[first] if first < len(ids) else "no more cuts"
            self.problems.append(
                f"{where}: row {first} of the shard is {found!r}, the cuts file has {expected!r} "
                "(rows must be the cuts in shard order)"
            )
            return
        if rows.get("position") != list(range(len(ids))):
            self.problems.append(
                f"{where}: the position column does not number the shard's cuts 0..{len(ids) - 1}"
            )
        for label, frames in sorted(result["cut_frames"].items()):
            column = self.frames.get(label)
            if column in rows and rows[column] != frames:
                i = next(i for i, (a, b) in enumerate(zip(rows[column], frames, strict=True)) if a != b)
                self.problems.append(
                    f"{where}, cut {ids[i]}: catalog {column} = {rows[column][i]}, "
                    f"the {label} codes have {frames[i]} frames"
                )

    def finish(self, cuts: int) -> list[str]:
        extra = max(len(self._buffer["cut_id"]) - self._at, 0) + sum(b.num_rows for b in self._batches)
        if extra:
            self.problems.append(
                f"dataset {self.dataset}, catalog {self.path}: {extra} row(s) beyond the {cuts} cuts "
                "of the shards"
            )
        return self.problems


def _stray_files(shar_dir: Path, all_fields: list[Field], num_shards: int) -> list[str]:
    strays = []
    for fd in all_fields:
        expected = {fd.name(s) for s in range(num_shards)}
        folder = shar_dir / fd.folder
        if folder.is_dir():
            strays += [
                f"field {fd.label}: stray file {p}"
                for p in sorted(folder.iterdir())
                if p.name not in expected
            ]
    return strays


def _compare_totals(
    dataset: str, totals: dict, shar_stats: dict, codes_stats: dict[str, dict], num_shards: int
) -> list[str]:
    problems = []
    if totals["cuts"] != shar_stats["cuts"]:
        problems.append(
            f"dataset {dataset}: {totals['cuts']} cuts in the shards, the shar stats say {shar_stats['cuts']}"
        )
    if abs(totals["target_seconds"] / 3600 - shar_stats["hours"]) > 1e-5 + 1e-6 * totals["cuts"]:
        problems.append(
            f"dataset {dataset}: {totals['target_seconds'] / 3600:.6f} h in the shards, the shar stats "
            f"say {shar_stats['hours']} h"
        )
    for name, stats in codes_stats.items():
        if stats["cuts"] != totals["cuts"] or stats["shards"] != num_shards:
            problems.append(
                f"dataset {dataset}, codec {name}: codes stats count {stats['cuts']} cuts in "
                f"{stats['shards']} shards, the shards hold {totals['cuts']} in {num_shards}"
            )
    return problems


def verify_dataset(
    dataset: str,
    *,
    shar_dir: str,
    plan: str,
    shar_stats: str,
    codes_stats: dict[str, str],
    catalog: str,
    out: str,
    workers: int = 0,
) -> dict:
    """Check every shard of every field and the catalog; write `out` (verify.json) only when nothing
    is wrong."""
    from tqdm import tqdm

    num_shards = planned_shards(plan)
    codec_stats = {name: read_json(path) for name, path in sorted(codes_stats.items())}
    codecs = tuple(codec_info(name, s) for name, s in codec_stats.items())
    root = Path(shar_dir)
    all_fields = fields([c.name for c in codecs])
    problems: list[str] = []
    for fd in all_fields:
        missing = [s for s in range(num_shards) if not (root / fd.folder / fd.name(s)).is_file()]
        if missing:
            problems.append(
                f"dataset {dataset}, field {fd.label}: {len(missing)} of {num_shards} planned shards "
                f"missing, first shard {missing[0]} ({root / fd.folder / fd.name(missing[0])})"
            )
    problems += [f"dataset {dataset}, {s}" for s in _stray_files(root, all_fields, num_shards)]
    totals: Counter = Counter()
    frames: Counter = Counter()
    constant_shards: Counter = Counter()
    checks = (
        ShardCheck(dataset, s, {fd.label: str(root / fd.folder / fd.name(s)) for fd in all_fields}, codecs)
        for s in range(num_shards)
    )
    if not problems:  # a missing file would only repeat itself in every shard
        rows = CatalogCheck(dataset, catalog, codecs)
        with tqdm(total=num_shards, desc=f"verify {dataset}", unit="shard", mininterval=5) as progress:
            for _, result in ordered_map(verify_shard, checks, resolve_workers(workers)):
                problems += result["problems"]
                rows.shard(result)
                for key in ("cuts", "target_seconds", "context_seconds"):
                    totals[key] += result[key]
                frames.update(result["frames"])
                for label, codebooks in result["constant_codebooks"].items():
                    constant_shards[label] += 1
                    log.warning(
                        "dataset %s, field %s, shard %d: codebook(s) %s hold one value in every frame: is "
                        "the codec trained, and run in the right precision?",
                        dataset,
                        label,
                        result["shard"],
                        codebooks,
                    )
                progress.update()
        problems += rows.finish(totals["cuts"])
        if not problems:
            problems += _compare_totals(dataset, totals, read_json(shar_stats), codec_stats, num_shards)
    if problems:
        for p in problems:
            log.error("%s", p)
        shown = "\n  ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = (
            f"\n  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more (see the log)"
            if len(problems) > MAX_PROBLEMS_SHOWN
            else ""
        )
        raise SharflowError(
            f"verify {dataset}: {len(problems)} problem(s) in {shar_dir}:\n  {shown}{more}\n"
            "Delete the named shard files and rerun snakemake to rebuild them."
        )
    summary = {
        "dataset": dataset,
        "ok": True,
        "shards": num_shards,
        "fields": [fd.label for fd in all_fields],
        "cuts": totals["cuts"],
        "hours": round(totals["target_seconds"] / 3600, 6),
        "context_hours": round(totals["context_seconds"] / 3600, 6),
        "codec_frames": dict(sorted(frames.items())),
        "shards_with_constant_codebooks": {
            fd.label: constant_shards[fd.label] for fd in all_fields if fd.label in frames
        },
        "codecs": {c.name: {"num_codebooks": c.num_codebooks, "frame_shift": c.frame_shift} for c in codecs},
        "catalog_rows": rows.rows,
    }
    write_json(out, summary)
    log.info(
        "verify %s: %d shards × %d fields whole: %d cuts, %.3f h",
        dataset,
        num_shards,
        len(all_fields),
        summary["cuts"],
        summary["hours"],
    )
    return summary
