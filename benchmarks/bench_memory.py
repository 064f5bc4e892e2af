"""Peak memory of each job as the dataset grows: the demo corpus 1x and 10x (repeated), prepare to shar.

Both datasets go through the real workflow (local profile, prepare → context → shar, no codes) in
one run. Each job's log ends with its exact peak RSS (getrusage: the job process, and the largest
of its worker processes); Snakemake's `benchmark:` max_rss is sampled and misses short jobs. A
stage whose memory does not grow with the dataset shows a 10x / 1x ratio near 1. Shards hold 64
cuts in both, so shard jobs do the same work per job (1 shard vs 9).

    .venv/bin/python benchmarks/bench_memory.py [--copies 10]
"""

import argparse
import json
import re
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml
from _corpus import repeated_demo, snakemake_command

REPO = Path(__file__).resolve().parents[1]
RULES = ("prepare", "context_plan", "context_part", "context_merge", "shar_plan", "shar_shard", "shar_merge")


def peak_rss(work: Path, dataset: str) -> dict[str, float]:
    """Largest peak RSS (MB, job process or a worker, whichever is larger) over each rule's jobs."""
    out: dict[str, float] = defaultdict(float)
    for log in (work / "logs").rglob("*.log"):
        rel = log.relative_to(work / "logs").parts  # <rule>/<dataset>.log or <rule>/<dataset>/...
        if rel[0] in RULES and rel[1].split(".")[0] == dataset:
            found = re.search(r"peak RSS (\d+) MB, largest worker process (\d+) MB", log.read_text())
            if found:
                out[rel[0]] = max(out[rel[0]], *map(float, found.groups()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_memory-") as tmp:
        work = Path(tmp)
        cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        cfg["datasets"] = {}
        for name, copies in (("x1", 1), (f"x{args.copies}", args.copies)):
            manifest, root = repeated_demo(work / "inputs" / name, copies, link=True)
            cfg["datasets"][name] = {"manifest": str(manifest), "audio_root": str(root), "language": "en"}
        cfg["context"]["parts"] = 1
        cfg["shar"]["shard_size"] = 64
        cfg["codecs"] = {}
        (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        targets = [f"results/{name}/shar_stats.json" for name in cfg["datasets"]]
        cmd = snakemake_command(work, "--cores", "2", *targets)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-4000:])
        small, large = (peak_rss(work, name) for name in cfg["datasets"])
        records = {
            name: json.loads((work / "results" / name / "shar_stats.json").read_text())["cuts"]
            for name in cfg["datasets"]
        }
        print(
            f"peak RSS per job (MB), {records['x1']} vs {records[f'x{args.copies}']} cuts; ratio "
            "should stay near 1"
        )
        print(f"{'rule':<15}{'1x':>10}{f'{args.copies}x':>10}{'ratio':>8}")
        for rule in RULES:
            if rule in small and rule in large:
                print(f"{rule:<15}{small[rule]:>10.0f}{large[rule]:>10.0f}{large[rule] / small[rule]:>8.2f}")


if __name__ == "__main__":
    main()
