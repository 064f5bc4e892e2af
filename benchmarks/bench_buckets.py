"""Bucket bins of 1,000,000 cuts: from the catalog's columns vs from the Shar cuts files.

Writes a synthetic dataset of `--cuts` cuts in shards of `--shard-size`: the cuts files as the
shar stage writes them (gzip JSON lines of full lhotse cuts, one demo cut as the template, each
with its own duration and text), and their catalog through the real path (one fragment per
shard, sharflow.dataset.catalog.merge_catalog). Then computes the same 1D + 2D bins both ways, each in a
fresh process, and prints wall time (after the imports both paths share, which are printed apart)
and peak RSS of each, the ratio, and the floor: a process that only imports what both paths import
(its peak RSS is what the imports alone take). The two paths must give identical bins.

    .venv/bin/python benchmarks/bench_buckets.py [--cuts 1000000] [--work DIR]
"""

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sharflow.dataset.catalog import catalog_row, merge_catalog, write_fragment

REPO = Path(__file__).resolve().parents[1]

RUN = """
import json, resource, sys, time
t0 = time.perf_counter()
from sharflow.dataset.buckets import bucket_bins, read_catalog_lengths, read_cut_lengths
import pyarrow.parquet
t1 = time.perf_counter()
how, paths = sys.argv[1], sys.argv[2:]
if how == "floor":
    result = {}
elif how == "catalog":
    durations, lengths, _ = read_catalog_lengths(paths[0])
    result = bucket_bins(durations, lengths, num_buckets=30, sub_buckets=5)
else:
    durations, lengths = read_cut_lengths(paths)
    result = bucket_bins(durations, lengths, num_buckets=30, sub_buckets=5)
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t1, "imports": t1 - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "bins": result}))
"""


def template_cut() -> dict:
    """A real cut of the demo run's layout (recording, supervision, custom fields)."""
    return {
        "id": "spk-file-0-100000",
        "start": 0.0,
        "duration": 5.0,
        "channel": 0,
        "supervisions": [
            {
                "id": "spk-file-0-100000",
                "recording_id": "spk/file",
                "start": 0.0,
                "duration": 5.0,
                "channel": 0,
                "text": "",
                "language": "en",
                "speaker": "| Language:en Dataset:bench Speaker:spk |",
                "custom": {
                    "normalized_text": "",
                    "context_audio_filepath": "spk/other.flac",
                    "context_audio_offset": 0.0,
                    "context_audio_duration": 6.2,
                    "context_audio_text": "The birch canoe slid on the smooth planks.",
                    "context_speaker_similarity": 0.91,
                    "context_recording_id": "spk/other",
                },
            }
        ],
        "recording": {
            "id": "spk/file",
            "sources": [{"type": "file", "channels": [0], "source": "/data/bench/spk/file.flac"}],
            "sampling_rate": 22050,
            "num_samples": 110250,
            "duration": 5.0,
            "channel_ids": [0],
        },
        "type": "MonoCut",
    }


def write_dataset(work: Path, cuts: int, shard_size: int) -> tuple[list[str], str]:
    """Cuts files and the catalog of `cuts` synthetic cuts (kept in `work` for the next run)."""
    catalog = work / "catalog.parquet"
    shards = -(-cuts // shard_size)
    cut_files = [str(work / "cuts" / f"cuts.{s:06d}.jsonl.gz") for s in range(shards)]
    if catalog.exists() and all(Path(p).exists() for p in cut_files):
        return cut_files, str(catalog)
    (work / "cuts").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    words = ["the", "birch", "canoe", "slid", "on", "smooth", "planks", "glue", "sheet", "to", "dark", "blue"]
    cut = template_cut()
    sup = cut["supervisions"][0]
    fragments = []
    start = time.perf_counter()
    for s, path in enumerate(cut_files):
        n = min(shard_size, cuts - s * shard_size)
        durations = np.round(rng.gamma(4.0, 1.6, n) + 0.5, 6)
        lengths = rng.integers(3, 40, n)
        rows = []
        with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as f:
            for i in range(n):
                d = float(durations[i])
                text = " ".join(words[(i + k) % len(words)] for k in range(int(lengths[i])))
                cid = f"spk-file{s}-{i}"
                cut["id"] = sup["id"] = cid
                cut["duration"] = sup["duration"] = d
                sup["text"] = text
                sup["custom"]["normalized_text"] = text.capitalize()
                f.write(json.dumps(cut) + "\n")
                record = {
                    "audio_filepath": f"spk/file{s}.flac",
                    "offset": 0.0,
                    "duration": d,
                    "text": text,
                    "normalized_text": text.capitalize(),
                    "speaker": sup["speaker"],
                    "source_audio": {"sampling_rate": 22050},
                    "context_audio_filepath": "spk/other.flac",
                    "context_audio_offset": 0.0,
                    "context_audio_duration": 6.2,
                    "context_speaker_similarity": 0.91,
                }
                samples = round(d * 22050)
                rows.append(
                    catalog_row(
                        record,
                        cut_id=cid,
                        shard=s,
                        position=i,
                        language="en",
                        target=(22050, samples),
                        context=(22050, 136710),
                    )
                )
        fragments.append(str(work / "fragments" / f"{s:06d}.parquet"))
        write_fragment(rows, fragments[-1])
        if s % 100 == 0:
            print(f"  wrote shard {s} of {shards} ({time.perf_counter() - start:.0f} s)", flush=True)
    t = time.perf_counter()
    merge_catalog(fragments, str(catalog), codecs=[])
    print(f"  catalog merged from {shards} fragments in {time.perf_counter() - t:.1f} s")
    return cut_files, str(catalog)


def measure(how: str, paths: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", RUN, how, *paths], capture_output=True, text=True, check=False
    )
    if proc.returncode:
        raise SystemExit(f"{how} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=1_000_000)
    parser.add_argument("--shard-size", type=int, default=2000)
    parser.add_argument("--work", type=Path, default=None, help="keep the synthetic dataset here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_buckets."))
    print(f"bench_buckets: {args.cuts:,} cuts in shards of {args.shard_size} under {work}")
    cut_files, catalog = write_dataset(work, args.cuts, args.shard_size)
    size_cuts = sum(Path(p).stat().st_size for p in cut_files) / 1e6
    size_catalog = Path(catalog).stat().st_size / 1e6
    floor = measure("floor", [])
    from_catalog = measure("catalog", [catalog])
    from_cuts = measure("cuts", cut_files)
    same = from_catalog["bins"] == from_cuts["bins"]
    ratio = from_cuts["seconds"] / from_catalog["seconds"]
    for name, m, note in (
        ("floor (imports only)", floor, ""),
        ("catalog path", from_catalog, f"({size_catalog:.0f} MB catalog)"),
        ("cuts-file path", from_cuts, f"({size_cuts:.0f} MB of cuts files)"),
    ):
        print(
            f"  {name:24s} {m['seconds']:7.2f} s (+{m['imports']:.2f} s imports)   "
            f"peak RSS {m['rss_mb']:7.0f} MB   {note}"
        )
    bar = "met" if ratio >= 10 else "NOT met"
    print(f"  catalog path {ratio:.1f}x faster than the cuts files (bar: >= 10x: {bar})")
    print(
        f"  identical bins both ways: {same} ({from_catalog['bins']['num_buckets']} buckets, "
        f"{len(from_catalog['bins'].get('bucket_duration_bins_2d', []))} 2D bins)"
    )
    if not same:
        raise SystemExit("the two paths gave different bins")


if __name__ == "__main__":
    main()
