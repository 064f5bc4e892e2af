"""The codes stage through Snakemake: model loads, wall time and fixed-cost share, by block size.

Corpus: the demo manifest repeated `--copies` times (each copy's audio in its own folder: distinct
files, the demo's speakers), shard_size 16 as the demo has: 6 copies give 336 cuts in 21 shards.
The workflow runs up to the shards and the codec first (not timed); then the codes stage is run
alone, local profile, `--cores 2`, one CPU rank per job (codes.workers 1), once per block size:
`codes.shards_per_job` 1 (a model load per shard: the floor this change is measured against) and
the default (10) (`--sizes`; `--shard-size` for shards other than the demo's 16 cuts). Printed per run:

- model loads: `codec ... loaded on` lines in the codes jobs' logs;
- wall: the snakemake call's seconds (the codes jobs and codes_merge);
- fixed-cost share: the share of rank-seconds (wall x 2, the ranks that can run at once) not spent
  encoding, where encoding is each shard's decode + forward + write (its stats' `seconds`).

    .venv/bin/python benchmarks/bench_codes_jobs.py [--copies 6]
"""

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from _corpus import repeated_demo, snakemake_command

from sharflow.core.layout import codec_spec, dataset_files

REPO = Path(__file__).resolve().parents[1]
CODEC = "tiny_nemo"


def write_config(work: Path, manifest: Path, root: Path, shards_per_job: int, shard_size: int) -> None:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["datasets"] = {"bench": {"manifest": str(manifest), "audio_root": str(root), "language": "en"}}
    cfg["quality"] = {"enabled": False}
    cfg["codecs"][CODEC]["random_from_config"] = str(REPO / cfg["codecs"][CODEC]["random_from_config"])
    cfg["codes"].update(workers=1, shards_per_job=shards_per_job)
    cfg["shar"]["shard_size"] = shard_size
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def run(work: Path, *targets: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(snakemake_command(work, "--cores", "2", *targets), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def codes_job_logs(work: Path) -> list[Path]:
    """The log folders of the codes jobs' rules (codes_block, codes_tail<n>, codes_shard, ...)."""
    return [p for p in (work / "logs").glob("codes_*") if p.name != "codes_merge"]


def codes_stage(work: Path, shards_per_job: int, manifest: Path, root: Path, shard_size: int) -> dict:
    """The codes stage alone (its outputs and logs removed first), timed and read back."""
    files = dataset_files("bench")
    for path in (f"{files.shar_dir}/codes_{CODEC}", f"{files.root}/codes_jobs", f"{files.root}/codes_stats"):
        shutil.rmtree(work / path, ignore_errors=True)
    for folder in codes_job_logs(work):
        shutil.rmtree(folder)
    write_config(work, manifest, root, shards_per_job, shard_size)
    wall = run(work, files.codes_stats(CODEC))
    logs = [p.read_text() for folder in codes_job_logs(work) for p in folder.rglob("*.log")]
    stats = [
        json.loads(p.read_text()) for p in (work / files.root / "codes_jobs" / CODEC).glob("*.stats.json")
    ]
    encoding = sum(s["seconds"] for s in stats)
    return {
        "jobs": len(logs),
        "loads": sum(text.count(f"codec {CODEC} loaded on") for text in logs),
        "shards": len(stats),
        "wall": wall,
        "encoding": encoding,
        "fixed": 1 - encoding / (wall * 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=6)
    parser.add_argument("--shard-size", type=int, default=16, help="cuts per shard (the demo's: 16)")
    parser.add_argument("--sizes", default="1,10", help="codes.shards_per_job values to run (1: the floor)")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench_codes_jobs-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        manifest, root = repeated_demo(Path(tmp), args.copies, link=True)
        write_config(work, manifest, root, 10, args.shard_size)
        files = dataset_files("bench")
        setup = run(work, files.shar_stats, codec_spec(CODEC))
        shards = json.loads((work / files.shard_plan).read_text())["num_shards"]
        size = f"{shards} shards of <= {args.shard_size} cuts"
        print(f"corpus: demo x {args.copies}, {size} (set-up {setup:.0f} s)")
        results = {n: codes_stage(work, n, manifest, root, args.shard_size) for n in sizes}
    columns = f"{'codes.shards_per_job':<22}{'jobs':>6}{'loads':>7}{'wall s':>9}{'encoding rank-s':>17}"
    print(f"{columns}{'fixed cost':>12}")
    for n, r in results.items():
        label = f"{n}" + {1: " (floor: per shard)", 10: " (default)"}.get(n, "")
        row = f"{label:<22}{r['jobs']:>6}{r['loads']:>7}{r['wall']:>9.1f}{r['encoding']:>17.1f}"
        print(f"{row}{r['fixed']:>12.0%}")
    if not {1, 10} <= set(results):
        return
    one, ten = results[1], results[10]
    print(
        f"codes stage, {shards} shards, --cores 2: default block {ten['wall']:.1f} s vs per shard "
        f"{one['wall']:.1f} s ({one['wall'] / ten['wall']:.2f}x faster); model loads {ten['loads']} vs "
        f"{one['loads']}; fixed-cost share {ten['fixed']:.0%} vs {one['fixed']:.0%} (bar: <= 30 %)"
    )


if __name__ == "__main__":
    main()
