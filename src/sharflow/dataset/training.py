"""The training hand-off: a NeMo Lhotse dataloader config (`input_cfg`) over every dataset, and with
splits configured the same form over the dev splits (`validation_ds`).

One `lhotse_shar` entry per dataset with `shar_path` as a dict of fields (cuts, target_audio,
context_audio, and the chosen codec's target_codes / context_codes) as brace-expanded shard
ranges, a weight proportional to hours unless the dataset overrides it, and tags; plus bucketing
settings with duration bins of the mix NeMo will sample.

Mixing (training.group_by, training.reweight_temperature): the entries may be nested in NeMo's
`type: group` entries, one per language or per value of a tag, each weighted by its datasets'
weights, and NeMo's `reweight_temperature` written with one value per level. NeMo then samples a
group with probability w_g^T0 / sum, and a dataset within it with w_d^T1 / sum
(nemo.collections.common.data.lhotse.cutset.temperature_reweighting); the duration bins are those
of that mix (`sampling_shares`), not of the plain weights.
"""

import os
from pathlib import Path

import numpy as np
import yaml

from sharflow.core import blocks, shar_fields
from sharflow.core.atomic import atomic_file, read_json
from sharflow.core.errors import SharflowError
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
        for f in shar_fields.fields([codec] if codec else [], bool(plan.get("indexed")))
    }
    return {
        "type": "lhotse_shar",
        "shar_path": fields,
        "weight": weight,
        "tags": {"dataset": name, **(ds.get("tags") or {})},
    }


def temperature_shares(weights: list[float], temperature: float) -> np.ndarray:
    """NeMo's temperature_reweighting: each weight raised to `temperature`, normalised (1: by weight;
    0: all alike)."""
    raised = np.asarray(weights, dtype=np.float64) ** temperature
    return raised / raised.sum()


def sampling_shares(weights: list[float], groups: list[str] | None, temperatures: list[float]) -> np.ndarray:
    """The share of NeMo's draws each dataset gets: by its weight's temperature share, or with
    `groups` (each dataset's group) the group's share of the groups' summed weights (temperatures[0])
    times the dataset's share within its group (temperatures[1])."""
    if groups is None:
        return temperature_shares(weights, temperatures[0])
    names = sorted(set(groups))
    totals = [sum(w for w, g in zip(weights, groups, strict=True) if g == name) for name in names]
    of_group = dict(zip(names, temperature_shares(totals, temperatures[0]), strict=True))
    shares = np.zeros(len(weights))
    for name in names:
        members = [i for i, g in enumerate(groups) if g == name]
        within = temperature_shares([weights[i] for i in members], temperatures[1])
        shares[members] = of_group[name] * within
    return shares


def _group_value(name: str, ds: dict, group_by: str) -> str:
    value = ds.get("language") if group_by == "language" else (ds.get("tags") or {}).get(group_by)
    if value is None:
        raise SharflowError(
            f"training.group_by: {group_by}: dataset {name} has no {group_by} "
            f"(set datasets.{name}.{'language' if group_by == 'language' else f'tags.{group_by}'})"
        )
    return str(value)


def _nested(entries: list[dict], groups: list[str], group_by: str) -> list[dict]:
    """The entries in one `type: group` entry per group value (sorted), each weighted by its members."""
    out = []
    for value in sorted(set(groups)):
        members = [e for e, g in zip(entries, groups, strict=True) if g == value]
        weight = round(sum(e["weight"] for e in members), 6)
        out.append({"type": "group", "weight": weight, "tags": {group_by: value}, "input_cfg": members})
    return out


def levels(temperature: float | list[float] | None, grouped: bool) -> list[float] | None:
    """training.reweight_temperature as NeMo's list of one value per nesting level (None: not set)."""
    if temperature is None:
        return None
    depth = 2 if grouped else 1
    return [float(t) for t in temperature] if isinstance(temperature, list) else [float(temperature)] * depth


def write_input_cfg(
    datasets: dict[str, dict],
    out: str,
    *,
    codec: str | None,
    num_buckets: int,
    settings: dict,
    path_prefix: str | None = None,
    use: str = "model.train_ds",
    group_by: str | None = None,
    temperature: float | list[float] | None = None,
) -> dict:
    """Write the NeMo dataloader config for `datasets` ({name: {shar_dir, plan (its shard plan),
    catalog, weight (None = hours), tags, language, and split: the catalog rows it is (default
    train)}}) and return it. A Shar set with no shards (an empty held-out split) is left out.

    Paths are absolute, or start with `path_prefix` in place of this machine's results folder (for a
    cluster that mounts it elsewhere). `use`: what the header comment says the file is for. With
    `group_by` ("language" or a tag's name) the entries are nested in groups; `temperature` (a
    number, or one a level) is written as NeMo's reweight_temperature (module docstring).
    """
    entries, groups, durations = [], [], []
    for name in sorted(datasets):
        ds = datasets[name]
        plan = read_json(ds["plan"])
        if not blocks.shard_numbers(plan):
            continue
        seconds = read_columns(ds["catalog"], ["duration"], split=ds.get("split", TRAIN))["duration"]
        weight = ds.get("weight") if ds.get("weight") is not None else round(float(seconds.sum()) / 3600, 6)
        entries.append(_entry(name, ds, weight, plan, codec, path_prefix))
        groups.append(_group_value(name, ds, group_by) if group_by else None)
        durations.append(seconds)
    temperatures = levels(temperature, group_by is not None)
    config = {
        "use_lhotse": True,
        "input_cfg": _nested(entries, groups, group_by) if group_by and entries else entries,
        **_bucket_settings(entries, groups if group_by else None, durations, temperatures, num_buckets),
        **({"reweight_temperature": temperatures} if temperatures else {}),
        **settings,
    }
    with atomic_file(out, "w", encoding="utf-8") as f:
        f.write(
            f"# NeMo Lhotse dataloader config written by sharflow: use it as {use} (with your batch "
            "settings).\n"
        )
        yaml.safe_dump(config, f, sort_keys=False)
    return config


def _bucket_settings(entries, groups, durations, temperatures, num_buckets: int) -> dict:
    """use_bucketing, num_buckets and the duration bins of the mix NeMo samples: each cut weighted by
    its dataset's share of the draws over its dataset's cuts."""
    weights = [e["weight"] for e in entries]
    kept = [i for i, (w, d) in enumerate(zip(weights, durations, strict=True)) if w and len(d)]
    bins = []
    if kept:
        chosen = [weights[i] for i in kept]
        if temperatures is None and groups is None:
            shares = np.asarray(chosen, dtype=np.float64)  # NeMo samples by the weights themselves
        else:
            shares = sampling_shares(
                chosen, [groups[i] for i in kept] if groups else None, temperatures or [1.0, 1.0]
            )
        mix = np.concatenate([durations[i] for i in kept])
        each = np.concatenate(
            [np.full(len(durations[i]), s / len(durations[i])) for i, s in zip(kept, shares, strict=True)]
        )
        requested = min(num_buckets, len(mix))
        bins = duration_bins(mix, requested, each) if requested >= 2 else []
    return {
        "use_bucketing": len(bins) > 0,
        "num_buckets": len(bins) + 1,  # ties or few cuts can give fewer buckets than asked for
        "bucket_duration_bins": bins or None,
    }
