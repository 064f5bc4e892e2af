"""Verify: open every shard of every Shar field of a dataset and prove the dataset is whole.

Checked, per shard (in worker processes, `verify.workers`):
- every field has the shard's file, and it opens (JSONL for cuts, gzipped in an unindexed set; tar
  for the others); in an indexed set (shar.index) every file has its index, and the index holds
  the bytes the file's own index has (sharflow.core.shar_index: what lhotse 2 seeks by);
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

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sharflow.core.atomic import read_json, write_json
from sharflow.core.blocks import planned_shards
from sharflow.core.errors import SharflowError
from sharflow.core.layout import plan_indexed
from sharflow.core.shar_fields import Field, fields
from sharflow.core.shar_index import index_path
from sharflow.verify.catalog_check import CatalogCheck
from sharflow.verify.shard import CodecInfo, ShardCheck, codec_info, verify_shard
from sharflow.work.parallel import ordered_map, resolve_workers

log = logging.getLogger(__name__)

MAX_PROBLEMS_SHOWN = 10


def _stray_files(shar_dir: Path, all_fields: list[Field], shards: list[int], indexed: bool) -> list[str]:
    strays = []
    for fd in all_fields:
        expected = {name for s in shards for name in _names(fd, s, indexed)}
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


@dataclass
class _Walk:
    """What the walk over every shard found: totals, codes frames, shards with constant codebooks,
    problems, and the catalog rows it compared."""

    totals: Counter = field(default_factory=Counter)
    frames: Counter = field(default_factory=Counter)
    constant_shards: Counter = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    catalog_rows: int = 0
    indexes: int = 0  # indexes that match their files

    def add(self, dataset: str, result: dict) -> None:
        self.problems += result["problems"]
        self.indexes += result["indexes"]
        for key in ("cuts", "target_seconds", "context_seconds"):
            self.totals[key] += result[key]
        self.frames.update(result["frames"])
        for label, codebooks in result["constant_codebooks"].items():
            self.constant_shards[label] += 1
            log.warning(
                "dataset %s, field %s, shard %d: codebook(s) %s hold one value in every frame: is "
                "the codec trained, and run in the right precision?",
                dataset,
                label,
                result["shard"],
                codebooks,
            )


def _names(fd: Field, shard: int, indexed: bool) -> tuple[str, ...]:
    """The file names of a field's shard: its file, and in an indexed set its index."""
    return (fd.name(shard), index_path(fd.name(shard))) if indexed else (fd.name(shard),)


def _missing_files(
    dataset: str, root: Path, all_fields: list[Field], shards: list[int], indexed: bool
) -> list[str]:
    problems = []
    for fd in all_fields:
        for k, what in enumerate(("shards", "shards' indexes")[: 1 + indexed]):
            missing = [s for s in shards if not (root / fd.folder / _names(fd, s, indexed)[k]).is_file()]
            if missing:
                first = root / fd.folder / _names(fd, missing[0], indexed)[k]
                problems.append(
                    f"dataset {dataset}, field {fd.label}: {len(missing)} of {len(shards)} planned {what} "
                    f"missing, first shard {missing[0]} ({first})"
                )
    strays = _stray_files(root, all_fields, shards, indexed)
    return problems + [f"dataset {dataset}, {s}" for s in strays]


def _walk_shards(
    dataset: str,
    root: Path,
    codecs: tuple[CodecInfo, ...],
    catalog: str,
    shards: list[int],
    workers: int,
    split: str | None,
    indexed: bool = False,
) -> _Walk:
    """Check every shard in `workers` processes, in shard order, and the catalog along them."""
    from tqdm import tqdm

    all_fields = fields([c.name for c in codecs], indexed)
    checks = (
        ShardCheck(
            dataset, s, {fd.label: str(root / fd.folder / fd.name(s)) for fd in all_fields}, codecs, indexed
        )
        for s in shards
    )
    walk, rows = _Walk(), CatalogCheck(dataset, catalog, codecs, split)
    with tqdm(total=len(shards), desc=f"verify {dataset}", unit="shard", mininterval=5) as progress:
        for _, result in ordered_map(verify_shard, checks, resolve_workers(workers)):
            walk.add(dataset, result)
            rows.shard(result)
            progress.update()
    walk.problems += rows.finish(walk.totals["cuts"])
    walk.catalog_rows = rows.rows
    return walk


def _fail(dataset: str, shar_dir: str, problems: list[str]) -> None:
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
    split: str | None = None,
) -> dict:
    """Check every shard of every field and the catalog (with `split`, that split's rows of the
    dataset's catalog); write `out` (verify.json) only when nothing is wrong. An empty held-out split
    has no shards and nothing to check."""
    shards = planned_shards(plan)
    num_shards = len(shards)
    if num_shards == 0:
        summary = {"dataset": dataset, "ok": True, "shards": 0, "cuts": 0, "hours": 0.0}
        write_json(out, summary)
        return summary
    codec_stats = {name: read_json(path) for name, path in sorted(codes_stats.items())}
    codecs = tuple(codec_info(name, s) for name, s in codec_stats.items())
    indexed = plan_indexed(plan)
    all_fields = fields([c.name for c in codecs], indexed)
    problems = _missing_files(dataset, Path(shar_dir), all_fields, shards, indexed)
    if problems:  # a missing file would only repeat itself in every shard
        _fail(dataset, shar_dir, problems)
    walk = _walk_shards(dataset, Path(shar_dir), codecs, catalog, shards, workers, split, indexed)
    problems = walk.problems or _compare_totals(
        dataset, walk.totals, read_json(shar_stats), codec_stats, num_shards
    )
    if problems:
        _fail(dataset, shar_dir, problems)
    summary = {
        "dataset": dataset,
        "ok": True,
        "shards": num_shards,
        "fields": [fd.label for fd in all_fields],
        **{"indexed": indexed, "indexes": walk.indexes},  # indexes that match their files
        "cuts": walk.totals["cuts"],
        "hours": round(walk.totals["target_seconds"] / 3600, 6),
        "context_hours": round(walk.totals["context_seconds"] / 3600, 6),
        "codec_frames": dict(sorted(walk.frames.items())),
        "shards_with_constant_codebooks": {
            fd.label: walk.constant_shards[fd.label] for fd in all_fields if fd.label in walk.frames
        },
        "codecs": {c.name: {"num_codebooks": c.num_codebooks, "frame_shift": c.frame_shift} for c in codecs},
        "catalog_rows": walk.catalog_rows,
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
