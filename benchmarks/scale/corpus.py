"""Emilia-shaped records for bench_scale's ladder: speakers, durations, containers, splits; the
with_context records, the catalog and the shards' files made from them."""

import json
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CONTAINERS = 2000
HELD_OUT = 0.03  # the share of speakers held out (dev and test)
SHARD_SIZE, SHARDS_PER_JOB = 4096, 10
CALIBRATION = 300  # the cost plan's sample (plan.sample_records): what a plan's memory is predicted from


# ---- Emilia-shaped inputs ----------------------------------------------------------------------


def corpus(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """`n` records' columns: speaker index (long-tailed counts), duration (3-30 s), container and
    member index, split (0 train, 1 dev, 2 test)."""
    rng = np.random.default_rng(seed)
    speakers = max(1, n // 40)  # Emilia: ~40 utterances a speaker on average
    weights = rng.pareto(1.2, speakers) + 1.0  # a long tail: few speakers with many utterances
    speaker = rng.choice(speakers, size=n, p=weights / weights.sum())
    duration = np.clip(rng.lognormal(np.log(8.0), 0.6, n), 3.0, 30.0).round(3)
    container = rng.integers(0, CONTAINERS, n)
    held = rng.random(speakers) < HELD_OUT
    split = np.where(held[speaker], 1 + (speaker % 2), 0)
    return {"speaker": speaker, "duration": duration, "container": container, "split": split}


SPLITS = ("train", "dev", "test")


def write_with_context(columns: dict[str, np.ndarray], path: Path) -> None:
    """Records as the context stage writes them (with_context.jsonl): each with its split and a
    same-speaker context (the record before it of its speaker, else itself)."""
    last: dict[int, int] = {}
    n = len(columns["duration"])
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            s, d, c = int(columns["speaker"][i]), float(columns["duration"][i]), int(columns["container"][i])
            audio = f"EN/EN-B{c:06d}.tar#EN_B{c:06d}_S{s:07d}_W{i:09d}.mp3"
            j = last.get(s, i)
            last[s] = i
            cj = int(columns["container"][j])
            context = f"EN/EN-B{cj:06d}.tar#EN_B{cj:06d}_S{s:07d}_W{j:09d}.mp3"
            record = {
                "audio_filepath": audio,
                "offset": 0.0,
                "duration": d,
                "text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "speaker": f"| Language:en Dataset:emilia Speaker:S{s:07d} |",
                "source_audio": {"sampling_rate": 24000, "num_samples": round(d * 24000), "num_channels": 1},
                "lang": "en",
                "normalized_text": f"utterance {i} of speaker {s}, spoken for the benchmark",
                "dnsmos_ovrl": 3.2,
                "split": SPLITS[int(columns["split"][i])],
                "context_audio_filepath": context,
                "context_audio_offset": 0.0,
                "context_audio_duration": float(columns["duration"][j]),
            }
            f.write(json.dumps(record) + "\n")


def write_catalog(columns: dict[str, np.ndarray], path: Path) -> None:
    """The dataset catalog's columns buckets reads (duration, text and normalized text lengths,
    split), in row groups as the catalog job writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sharflow.dataset.catalog import ROW_GROUP_ROWS

    n = len(columns["duration"])
    chars = 30 + (columns["duration"] * 14).astype(np.int64)
    table = pa.table(
        {
            "duration": columns["duration"],
            "text_chars": chars,
            "normalized_text_chars": chars + 2,
            "split": pa.array([SPLITS[s] for s in columns["split"]]).dictionary_encode(),
        }
    )
    pq.write_table(table, path, row_group_size=min(ROW_GROUP_ROWS, max(1, n)))


def write_shard_files(with_context: Path, folder: Path) -> None:
    """What each shar job leaves for the merges, as the shar job writes them (its code): a catalog
    fragment (sharflow.dataset.catalog.catalog_row, write_fragment) and stats per shard of
    SHARD_SIZE train records, beside an empty rejects file; and the context stage's stats."""
    from sharflow.core.layout import rejected_beside
    from sharflow.dataset.catalog import catalog_row, write_fragment
    from sharflow.shar.plan import cut_id

    (folder / "shards").mkdir(parents=True, exist_ok=True)
    shard, rows, seconds, records = 0, [], 0.0, 0

    def flush():
        fragment = folder / "shards" / f"shard-{shard:06d}.catalog.parquet"
        write_fragment(rows, str(fragment))
        stats = str(folder / "shards" / f"shard-{shard:06d}.stats.json")
        summary = {
            "shard": shard,
            "records_in": len(rows),
            "cuts": len(rows),
            "rejected": {},
            "target_seconds": round(seconds, 3),
            "context_seconds": round(seconds, 3),
            **dict.fromkeys(("clipped_samples", "clipped_cuts", "padded_cuts", "copied_spans"), 0),
            "encoded_spans": 2 * len(rows),
            "bytes": {
                "cuts": 300 * len(rows),
                "target_audio": 48_000 * len(rows),
                "context_audio": 48_000 * len(rows),
            },
            "seconds": 1.0,
        }
        Path(stats).write_text(json.dumps(summary))
        Path(rejected_beside(stats)).write_text("")
        codes = {  # what a codes job writes for the shard (sharflow.codes.shard._write_shard)
            "codec": "codec",
            "shard": shard,
            "cuts": len(rows),
            "items": 2 * len(rows),
            "batches": max(1, len(rows) // 16),
            "padding_efficiency": 0.97,
            "audio_seconds": round(2 * seconds, 3),
            "sample_rate": 24000,
            "samples_per_frame": 1024,
            "num_codebooks": 8,
            "codebook_size": 1024,
            "dtype": "int16",
            "devices": ["cuda:0"],
            "rank_seconds": [10.0],
            "seconds": 10.0,
        }
        (folder / "shards" / f"shard-{shard:06d}.codes.json").write_text(json.dumps(codes))

    with open(with_context, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            records += 1
            if record["split"] != "train":
                continue
            rate = record["source_audio"]["sampling_rate"]
            rows.append(
                catalog_row(
                    record,
                    cut_id=cut_id(record),
                    shard=shard,
                    position=len(rows),
                    language="en",
                    target=(rate, record["source_audio"]["num_samples"]),
                    context=(rate, round(record["context_audio_duration"] * rate)),
                )
            )
            seconds += record["duration"]
            if len(rows) == SHARD_SIZE:
                flush()
                shard, rows, seconds = shard + 1, [], 0.0
    if rows:
        flush()
    (folder / "context_stats.json").write_text(json.dumps({"records_out": records}))
    (folder / "codes_stats.json").write_text(json.dumps({"sample_rate": 24000, "samples_per_frame": 1024}))
