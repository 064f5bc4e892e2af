"""The training hand-off: a NeMo Lhotse dataloader config (`input_cfg`) over every dataset, and with
splits configured the same form over the dev splits (`validation_ds`).

One `lhotse_shar` entry per dataset with `shar_path` as a dict of fields (cuts, target_audio,
context_audio, and the chosen codec's target_codes / context_codes) as brace-expanded shard
ranges, a weight proportional to hours unless the dataset overrides it, and tags; plus bucketing
settings with duration bins of the weighted mix of all datasets.
"""

import os
from pathlib import Path

import numpy as np
import yaml

from sharflow.core import blocks, shar_fields
from sharflow.core.atomic import atomic_file, read_json
from sharflow.core.splits import TRAIN
from sharflow.dataset.buckets import duration_bins
from sharflow.dataset.catalog import read_columns


def _indices(first: int, count: int) -> str:
    last = first + count - 1
    return f"{{{first:06d}..{last:06d}}}" if last > first else f"{first:06d}"


def shard_range(folder: str, stem: str, suffix: str, first: int, count: int) -> str:
    """`folder/stem.{FFFFFF..LLLLLL}suffix`, the brace form lhotse and NeMo expand."""
    return f"{folder}/{stem}.{_indices(first, count)}{suffix}"


def shard_ranges(folder: str, stem: str, suffix: str, generations: list[dict]) -> str:
    """shard_range of a plan's one generation, or, for a plan that grew, one brace form of them all
    (`stem.{{000000..000011},{000020..000021}}suffix`: NeMo expands the braces of a string, not the
    items of a list)."""
    parts = [_indices(g["first"], g["shards"]) for g in generations if g["shards"]]
    indices = parts[0] if len(parts) == 1 else "{" + ",".join(parts) + "}"
    return f"{folder}/{stem}.{indices}{suffix}"


def _entry(name: str, ds: dict, weight: float, plan: dict, codec: str | None, path_prefix: str | None):
    """One `lhotse_shar` entry: every field's shard range, the weight and the tags."""
    shar = os.path.abspath(ds["shar_dir"])
    if path_prefix:
        shar = path_prefix.rstrip("/") + "/" + Path(ds["shar_dir"]).as_posix()
    gens = blocks.generations(plan)
    fields = {
        f.field: shard_ranges(f"{shar}/{f.folder}", f.prefix, f.suffix, gens)
        for f in shar_fields.fields([codec] if codec else [])
    }
    return {
        "type": "lhotse_shar",
        "shar_path": fields,
        "weight": weight,
        "tags": {"dataset": name, **(ds.get("tags") or {})},
    }


def write_input_cfg(
    datasets: dict[str, dict],
    out: str,
    *,
    codec: str | None,
    num_buckets: int,
    settings: dict,
    path_prefix: str | None = None,
    use: str = "model.train_ds",
) -> dict:
    """Write the NeMo dataloader config for `datasets` ({name: {shar_dir, plan (its shard plan),
    catalog, weight (None = hours), tags, and split: the catalog rows it is (default train)}}) and
    return it. A Shar set with no shards (an empty held-out split) is left out.

    Paths are absolute, or start with `path_prefix` in place of this machine's results folder (for a
    cluster that mounts it elsewhere). `use`: what the header comment says the file is for.
    """
    entries, all_durations, all_weights = [], [], []
    for name in sorted(datasets):
        ds = datasets[name]
        plan = read_json(ds["plan"])
        if not blocks.shard_numbers(plan):
            continue
        durations = read_columns(ds["catalog"], ["duration"], split=ds.get("split", TRAIN))["duration"]
        hours = float(durations.sum()) / 3600
        weight = ds.get("weight") if ds.get("weight") is not None else round(hours, 6)
        entries.append(_entry(name, ds, weight, plan, codec, path_prefix))
        if len(durations) and weight:
            all_durations.append(durations)
            all_weights.append(np.full(len(durations), weight / len(durations)))
    durations = np.concatenate(all_durations) if all_durations else np.zeros(0)
    requested = min(num_buckets, len(durations))
    bins = duration_bins(durations, requested, np.concatenate(all_weights)) if requested >= 2 else []
    config = {
        "use_lhotse": True,
        "input_cfg": entries,
        "use_bucketing": len(bins) > 0,
        "num_buckets": len(bins) + 1,  # ties or few cuts can give fewer buckets than asked for
        "bucket_duration_bins": bins or None,
        **settings,
    }
    with atomic_file(out, "w", encoding="utf-8") as f:
        f.write(
            f"# NeMo Lhotse dataloader config written by sharflow: use it as {use} (with your batch "
            "settings).\n"
        )
        yaml.safe_dump(config, f, sort_keys=False)
    return config
