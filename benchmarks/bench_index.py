"""Indexed Shar (docs: shar, Indexed Shar): what indexes cost the shard job, and what they save a reader.

1. The shard job with indexes (shar.index: true, the default) against the same job without
   (shar.index: false, gzipped cuts, no index: the floor, measured in the same run): plan and every
   shard job (write_planned) over the demo's with_context records --copies times, in this process,
   alternating, best of --repeats. The bar: within 1.05x.
2. Opening a Shar set of --shards shards of --cuts-per-shard cuts and reaching its last cut, with
   lhotse 2 (installed apart, as tests/test_lhotse2.py does): indexed (`CutSet.from_shar(...,
   indexed=True)`, then the last cut by index) against streaming (the set without indexes, every
   cut read up to the last, which is what a reader without indexes does to resume there). The
   shards are one demo shard's files hard-linked --shards times (what is read is real; the disk
   holds one copy).

Usage: python benchmarks/bench_index.py [--copies 18] [--shards 1000] [--cuts-per-shard 16] [--repeats 3]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _corpus import repeated_with_context

from sharflow.core.layout import DatasetFiles
from sharflow.core.shar_fields import fields, shard_files
from sharflow.core.shar_index import index_path
from sharflow.shar.audio import EncodeSettings

LHOTSE_2 = "lhotse==2.0.0a7"
READ = """
import json, sys, time
t = time.perf_counter()
from lhotse import CutSet
spec = json.load(open(sys.argv[1]))
start = time.perf_counter()
cuts = CutSet.from_shar(fields=spec["fields"], indexed=spec["indexed"])
if spec["indexed"]:
    reader = cuts.data
    opened = time.perf_counter()
    last = reader[len(reader) - 1]
else:
    opened = time.perf_counter()
    for last in cuts:
        pass
audio = last.load_custom("target_audio")
done = time.perf_counter()
print(json.dumps({"open": opened - start, "last": done - opened, "id": last.id, "samples": int(audio.size)}))
"""


def shard_job(out: Path, with_context: Path, root: Path, indexed: bool, shard_size: int = 256) -> float:
    """Plan + every shard job, one worker; seconds."""
    from sharflow.shar.plan import plan_shards
    from sharflow.shar.shard import write_planned

    shutil.rmtree(out, ignore_errors=True)
    files = DatasetFiles(str(out), indexed)
    start = time.perf_counter()
    plan_shards(
        str(with_context),
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=0,
        shards_per_job=1,
        indexed=indexed,
    )
    write_planned(files, EncodeSettings(audio_root=str(root)), 1)
    return time.perf_counter() - start


def many_shards(one: DatasetFiles, out: Path, shards: int, indexed: bool) -> dict[str, list[str]]:
    """Shard 0 of `one` (an indexed set) as `shards` shards under `out`, hard-linked (each file with
    its index when `indexed`; else the cuts gzipped and no index); {field: shard files}."""
    import gzip

    first = one.shard(0)
    sources = {"cuts": first.cuts, "target_audio": first.target, "context_audio": first.context}
    layout = {}
    for field in fields([], indexed):
        paths = shard_files(str(out), field, list(range(shards)))
        source = sources[field.field]
        Path(paths[0]).parent.mkdir(parents=True, exist_ok=True)
        if field.field == "cuts" and not indexed:
            Path(paths[0]).write_bytes(gzip.compress(Path(source).read_bytes(), mtime=0))
            source = paths[0]
        for path in paths:
            if path != source:
                os.link(source, path)
            if indexed:
                os.link(index_path(source), index_path(path))
        layout[field.field] = paths
    return layout


def read_last(lhotse2: Path, layout: dict, indexed: bool, tmp: Path) -> dict:
    spec = tmp / f"read-{indexed}.json"
    spec.write_text(json.dumps({"fields": layout, "indexed": indexed}))
    env = {**os.environ, "PYTHONPATH": str(lhotse2)}
    proc = subprocess.run(
        [sys.executable, "-c", READ, str(spec)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=18)
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cuts-per-shard", type=int, default=16, help="of the set read by lhotse 2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        with_context, root, records = repeated_with_context(tmp, args.copies)
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.repeats):
            for indexed in (False, True):
                best[indexed] = min(
                    best[indexed], shard_job(tmp / f"out-{indexed}", with_context, root, indexed)
                )
        print(f"shard job, {len(records)} records in shards of 256, best of {args.repeats}:")
        ratio = best[True] / best[False]
        print(f"  without indexes (floor) {best[False]:.2f} s, with {best[True]:.2f} s: {ratio:.3f}x")

        lhotse2 = tmp / "lhotse2"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(lhotse2), LHOTSE_2],
            check=True,
        )
        shard_job(tmp / "one", with_context, root, True, args.cuts_per_shard)
        one = DatasetFiles(str(tmp / "one"))
        reads = {}
        for indexed in (True, False):
            layout = many_shards(one, tmp / f"many-{indexed}" / "shar", args.shards, indexed)
            reads[indexed] = read_last(lhotse2, layout, indexed, tmp)
        assert reads[True]["id"] == reads[False]["id"] and reads[True]["samples"] == reads[False]["samples"]
        cuts = len(Path(one.shard(0).cuts).read_text().splitlines()) * args.shards
        print(f"lhotse 2, a set of {args.shards} shards ({cuts} cuts): open it and read its last cut's audio")
        for indexed, name in ((True, "indexed"), (False, "streamed (no index)")):
            r = reads[indexed]
            print(f"  {name:20s} open {r['open']:.3f} s, to the last cut {r['last']:.3f} s")
        total = {k: r["open"] + r["last"] for k, r in reads.items()}
        speedup = total[False] / total[True]
        print(f"  indexed / streamed: {total[True] / total[False]:.4f} ({speedup:.0f}x faster)")


if __name__ == "__main__":
    main()
