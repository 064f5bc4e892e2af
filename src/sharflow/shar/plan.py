"""The shar stage's plan (a Snakemake checkpoint) and the ids of cuts and recordings.

A seeded shuffle of with_context.jsonl (grouped by speaker, so training needs it mixed) into shards
of `shard_size` records with contiguous indices from 0. shard_plan.json holds the counts;
shar_index.npy the byte offset of every record in shuffled order (8 bytes per record), so a shard
job reads only its own lines. Imports neither lhotse nor torch: the plan job starts in a blink.
"""

import hashlib
import json
import logging
import math
from collections import Counter
from pathlib import Path

import numpy as np

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.errors import SharflowError

log = logging.getLogger(__name__)


# ---- ids ----------------------------------------------------------------------------------------


def recording_id(audio_filepath: str) -> str:
    """A recording id from a path relative to the audio root: extension dropped, `/` -> `-`."""
    stem = audio_filepath.rsplit(".", 1)[0] if "." in Path(audio_filepath).name else audio_filepath
    return stem.replace("/", "-")


def segment_id(audio_filepath: str, offset: float, duration: float) -> str:
    """A stable id for a span of a file, at 10 µs resolution (two segments never collide)."""
    return f"{recording_id(audio_filepath)}-{round(offset * 1e5)}-{round(duration * 1e5)}"


def cut_id(record: dict) -> str:
    return segment_id(record["audio_filepath"], record["offset"], record["duration"])


# ---- plan ---------------------------------------------------------------------------------------


def plan_shards(
    with_context: str, *, plan: str, index: str, shard_size: int, seed: int, split: str | None = None
) -> dict:
    """Shuffle the records with `seed` into shards of `shard_size`; write the `plan` JSON and the `index`.

    With `split` (splits configured), only that split's records: the others are counted in the
    plan's `held_out` by split. Raises SharflowError if two records would get the same cut id.
    """
    offsets, hashes, seconds = [], [], []
    held_out: Counter[str] = Counter()
    with open(with_context, "rb") as f:
        offset = 0
        for raw in f:
            record = json.loads(raw)
            if split is None or record["split"] == split:
                offsets.append(offset)
                hashes.append(
                    int.from_bytes(hashlib.blake2b(cut_id(record).encode(), digest_size=8).digest(), "little")
                )
                seconds.append(record["duration"])
            else:
                held_out[record["split"]] += 1
            offset += len(raw)
    offsets_arr = np.asarray(offsets, dtype=np.int64)
    del offsets
    _check_unique_ids(np.asarray(hashes, dtype=np.uint64), with_context)
    n = len(offsets_arr)
    order = np.random.default_rng(seed).permutation(n)
    # a held-out split may be empty: no shards; a dataset's own (train) Shar has at least one
    num_shards = (
        math.ceil(n / shard_size) if split not in (None, "train") else max(1, math.ceil(n / shard_size))
    )
    durations = np.asarray(seconds)[order]
    planned = {
        "records": n,
        "shard_size": shard_size,
        "seed": seed,
        "num_shards": num_shards,
        **({"split": split, "held_out": dict(sorted(held_out.items()))} if split is not None else {}),
        "shards": [
            {
                "index": s,
                "records": int(min(shard_size, n - s * shard_size)) if n else 0,
                "seconds": round(float(durations[s * shard_size : (s + 1) * shard_size].sum()), 3),
            }
            for s in range(num_shards)
        ],
    }
    with atomic_file(index, "wb") as f:
        np.save(f, offsets_arr[order])
    write_json(plan, planned)
    log.info("shar plan: %d records into %d shards of %d (seed %d)", n, num_shards, shard_size, seed)
    return planned


def _check_unique_ids(hashes: np.ndarray, path: str) -> None:
    ordered = np.sort(hashes)
    clash = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(clash):
        lines = []
        with open(path, "rb") as f:
            for line_no, raw in enumerate(f, start=1):
                cid = cut_id(json.loads(raw))
                if (
                    int.from_bytes(hashlib.blake2b(cid.encode(), digest_size=8).digest(), "little")
                    == clash[0]
                ):
                    lines.append(f"line {line_no} ({cid})")
        raise SharflowError(
            f"{path}: records {' and '.join(lines)} map to the same cut id; two audio files differ only "
            "in '/' vs '-' or in their extension. Rename one of them."
        )
