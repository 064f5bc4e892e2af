"""Warm starts (sharflow.work.warm): the shipped demo through the whole workflow with its jobs started
cold, then warm, on this machine's cores.

The cold run is the floor's measure here: the same workflow, config and cores, each job a new
interpreter that imports what it needs (NeMo's ~10 CPU-seconds for every codes, text, quality and
segment job). Prints, for each run, its wall time, the CPU-seconds of every process it started
(this process is their subreaper, so the warm server and its forks, which outlive the job that
started the server, are counted too), its jobs, and the warm run's ratios to the cold one's; then
checks that both wrote the same bytes (every Shar file, catalog and bucket file of every dataset).

    .venv/bin/python benchmarks/bench_warm.py [--datasets demo talks ...] [--cores 2]
"""

import argparse
import ctypes
import hashlib
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import yaml
from _corpus import REPO, snakemake_command

from sharflow.work import warm

PR_SET_CHILD_SUBREAPER = 36


def config(work: Path, datasets: list[str] | None) -> None:
    """The shipped config, its paths made absolute (only `datasets`, if named), into work/config.yaml."""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg["datasets"] = {k: v for k, v in cfg["datasets"].items() if not datasets or k in datasets}
    for dataset in cfg["datasets"].values():
        for key in ("manifest", "audio_root"):
            if dataset.get(key):
                dataset[key] = str(REPO / dataset[key])
    for section in ("quality", "segment"):
        asr = cfg.get(section, {}).get("asr", {})
        if asr.get("random_from_config"):
            asr["random_from_config"] = str(REPO / asr["random_from_config"])
    for codec in cfg["codecs"].values():
        if codec.get("random_from_config"):
            codec["random_from_config"] = str(REPO / codec["random_from_config"])
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(work: Path, cores: int, warm_starts: bool) -> dict:
    """One whole run; its wall time, CPU-seconds of everything it started, and jobs."""
    env = {**os.environ, warm.OFF: "1" if warm_starts else "0"}
    cmd = snakemake_command(work, "--cores", str(cores))
    cpu, start = children_cpu(), time.perf_counter()
    with open(work / "snakemake.log", "w") as log:
        code = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - start
    while True:  # the orphans this process took in as their subreaper (the warm server) end too
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    if code != 0:
        raise SystemExit(f"the run in {work} failed ({code}): {work / 'snakemake.log'}")
    jobs = sum(1 for _ in (work / "logs").rglob("*.cost.json"))
    return {"wall": wall, "cpu": children_cpu() - cpu, "jobs": jobs}


def digests(results: Path) -> dict[str, str]:
    """sha256 of every file a run must write the same: Shar shards, catalogs, buckets."""
    names = ("shar/", "catalog.parquet", "buckets.yaml")
    return {
        str(p.relative_to(results)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(results.rglob("*"))
        if p.is_file() and any(n in str(p.relative_to(results)) for n in names)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="*", help="the shipped config's datasets to run (default: all)")
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: the warm server's CPU would go uncounted")
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as tmp:
        figures = {}
        for name, warm_starts in (("cold", False), ("warm", True)):
            work = Path(tmp) / name
            config(work, args.datasets)
            figures[name] = run(work, args.cores, warm_starts)
            f = figures[name]
            print(f"{name}: {f['wall']:.1f} s, {f['cpu']:.1f} CPU-s, {f['jobs']} jobs", flush=True)
        cold, hot = figures["cold"], figures["warm"]
        print(f"warm / cold: wall {hot['wall'] / cold['wall']:.2f}, CPU {hot['cpu'] / cold['cpu']:.2f}")
        a, b = (digests(Path(tmp) / name / "results") for name in ("cold", "warm"))
        same = [k for k in a if a[k] == b.get(k)]
        print(f"identical files: {len(same)} of {len(a)} (cold) and {len(b)} (warm)")
        if len(same) != len(a) or len(a) != len(b) or not a:
            raise SystemExit("the warm run wrote other bytes than the cold one")


if __name__ == "__main__":
    main()
