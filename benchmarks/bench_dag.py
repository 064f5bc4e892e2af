"""Scale of the DAG: dry run (-n) and --rulegraph of a dataset planned into 10,000 shards × 2 codecs.

The demo corpus goes through prepare, context and the shar_plan checkpoint for real; the plan is
then rewritten to say 10,000 shards (a synthetic plan: the shard jobs are only planned, never run).
Snakemake then has to build every job: 1,000 shar and 2,000 codes jobs of 10 shards each
(shards_per_job), merge and catalog jobs that list one record per job. Prints wall time and the
peak RSS of the snakemake process, against a floor measured in the same run: a dry run of the same workflow
before the plan exists (the checkpoint not yet run: a DAG of a handful of jobs, so the figure is
the fixed cost of starting snakemake and parsing the workflow). Then the same plan as a finished
run: every shard file of every job and every job's record (sharflow.core.jobs) written (empty files,
their sizes recorded), so that every run checks 120,000 files against 3,000 records; a dry run of
that, and of it with one shard file missing (which must plan exactly its shar job and what follows).

    .venv/bin/python benchmarks/bench_dag.py [--shards 10000]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _corpus import snakemake_command

from sharflow.core.jobs import plan_jobs, write_job_record
from sharflow.core.layout import DatasetFiles, block_members, block_size, dataset_files

REPO = Path(__file__).resolve().parents[1]


def config(work: Path) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for dataset in cfg["datasets"].values():  # every dataset the shipped config has, paths made absolute
        for key in ("manifest", "audio_root"):
            dataset[key] = str(REPO / dataset[key])
        dataset.pop("splits", None)  # one Shar set per dataset: the 10,000 shards are one set's
    tiny = {"backend": "nemo", "random_from_config": str(REPO / "config" / "models" / "tiny_codec.yaml")}
    cfg["codecs"] = {"codec_a": tiny, "codec_b": dict(tiny)}
    cfg["context"]["parts"] = 1
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return cfg


def finish_every_job(work: Path, codecs: list[str]) -> int:
    """Every planned shard file of the demo's plan (empty) and every shar and codes job's record, in the
    order a run writes them (shar, then codes: newer than the shar records they read). Files written."""
    files = DatasetFiles(str(work / "results" / "demo"))
    num_shards = json.loads(Path(files.shard_plan).read_text())["num_shards"]
    written = 0
    for stage in ("shar", *codecs):
        for block, count in plan_jobs(num_shards, 10):
            if stage == "shar":
                outputs = files.shard_block(block, block_size(block), count)
            else:
                outputs = files.codes_block(stage, block, block_size(block), count)
            paths = [p for name, p in outputs.items() if name != "job"]
            for path in paths:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).touch()
            write_job_record(outputs["job"], block_members(block, block_size(block), count), paths)
            written += len(paths) + 1
    return written


def snakemake(work: Path, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """(seconds, peak RSS in MB of the snakemake process, result): one process per call."""
    cmd = snakemake_command(work, *args)
    # a fresh child per call, so RUSAGE_CHILDREN's max RSS is this call's (it only grows otherwise)
    wrapper = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / "
        "1024, p.returncode); "
        "sys.stderr.write(p.stdout + p.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True)
    seconds, rss, rc = proc.stdout.split()
    if int(rc) != 0:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{proc.stderr[-6000:]}")
    return float(seconds), float(rss), proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_dag-") as tmp:
        work = Path(tmp)
        config(work)
        floor_s, floor_mb, _ = snakemake(work, "-n")
        print(f"floor: dry run before the plan exists: {floor_s:.1f} s, {floor_mb:.0f} MB")
        t0 = time.perf_counter()
        snakemake(work, dataset_files("demo").shard_plan)
        print(f"(prepare + context + shar_plan of the demo for real: {time.perf_counter() - t0:.0f} s)")
        plan_path = work / dataset_files("demo").shard_plan
        plan = json.loads(plan_path.read_text())
        plan.update(
            num_shards=args.shards,
            generations=[{"first": 0, "shards": args.shards, "records": args.shards}],
            shards=[{"index": i, "records": 1, "seconds": 1.0} for i in range(args.shards)],
        )
        plan_path.write_text(json.dumps(plan))
        inputs = DatasetFiles(str(work / "results" / "demo"))
        for block, count in plan_jobs(args.shards, 10):  # each shar job's records, as the plan writes them
            path = Path(inputs.shar_input(block, block_size(block), count))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"shards": []}) + "\n")

        dry_s, dry_mb, proc = snakemake(work, "-n")
        jobs = (
            proc.stderr.split("Job stats:")[1].split("total")[1].split()[0]
            if "Job stats:" in proc.stderr
            else "?"
        )
        print(
            f"dry run, {args.shards} shards x 2 codecs ({jobs} jobs): {dry_s:.1f} s, {dry_mb:.0f} MB "
            f"= {dry_s / floor_s:.1f}x the floor's time (bar: < 30 s)"
        )
        graph_s, graph_mb, _ = snakemake(work, "--rulegraph")
        print(f"--rulegraph: {graph_s:.1f} s, {graph_mb:.0f} MB")
        print(f"per planned shard: {(dry_s - floor_s) / args.shards * 1000:.2f} ms")

        snakemake(work, *(f"results/models/{c}.json" for c in ("codec_a", "codec_b")))  # the codecs, for real
        written = finish_every_job(work, ["codec_a", "codec_b"])
        done_s, done_mb, proc = snakemake(work, "-n")
        print(
            f"dry run of the finished run ({written} shard files and records, each checked): {done_s:.1f} s, "
            f"{done_mb:.0f} MB (bar: < 30 s)"
        )
        (work / dataset_files("demo").shard(4321).target).unlink()
        lost_s, lost_mb, proc = snakemake(work, "-n")
        planned = proc.stderr.split("Job stats:")[1].split("total")[0] if "Job stats:" in proc.stderr else ""
        counts = dict(line.split()[:2] for line in planned.splitlines()[3:] if line.strip())
        shar_jobs = {
            k: v for k, v in counts.items() if k.startswith(("shar_block", "shar_tail", "shar_shard"))
        }
        said = [line for line in proc.stderr.splitlines() if line.startswith("sharflow: ")]
        print(
            f"dry run of it with one shard file lost: {lost_s:.1f} s, {lost_mb:.0f} MB; it plans {shar_jobs} "
            f"(the lost file's job: 1 shar_block), and says {said}"
        )
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
