"""Scale of the DAG: dry run (-n) and --rulegraph of a dataset planned into 10,000 shards × 2 codecs.

The demo corpus goes through prepare, context and the shar_plan checkpoint for real; the plan is
then rewritten to say 10,000 shards (a synthetic plan: the shard jobs are only planned, never run).
Snakemake then has to build every job: 1,000 shar and 2,000 codes jobs of 10 shards each
(shards_per_job), merge and catalog jobs that list one record per job. Prints wall time and the
peak RSS of the snakemake process, against a floor measured in the same run: a dry run of the same workflow
before the plan exists (the checkpoint not yet run: a DAG of a handful of jobs, so the figure is
the fixed cost of starting snakemake and parsing the workflow). Then the same plan as a finished
run: every shard file of every job and every job's record (sharflow.work.jobs) written (empty files,
their sizes recorded), so that every run checks 120,000 files against 3,000 records; a dry run of
that, and of it with one shard file missing (which must plan exactly its shar job and what follows).

With `--records N` (issue 61: 4,500,000, 10,000 hours of Emilia) the plan is not rewritten: the
demo's record files are replaced by N Emilia-shaped records (bench_scale.py's), their modification
times kept, and the shar plan's own code plans them into shards of 4,096; the rest is the same.

    .venv/bin/python benchmarks/bench_dag.py [--shards 10000 | --records 4500000]
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

from sharflow.core.blocks import block_members, block_size
from sharflow.core.layout import DatasetFiles, dataset_files
from sharflow.work.jobs import plan_jobs, write_job_record

REPO = Path(__file__).resolve().parents[1]


def config(work: Path, shard_size: int | None = None) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    if shard_size:
        cfg["shar"]["shard_size"] = shard_size
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


def synthesize_plan(work: Path, shards: int) -> None:
    """The demo's plan rewritten to say `shards` shards of one record each, and each shar job's inputs
    file (no records: the shard jobs are only planned here, or their files made empty)."""
    plan_path = work / dataset_files("demo").shard_plan
    plan = json.loads(plan_path.read_text())
    plan.update(
        num_shards=shards,
        generations=[{"first": 0, "shards": shards, "records": shards}],
        shards=[{"index": i, "records": 1, "seconds": 1.0} for i in range(shards)],
    )
    plan_path.write_text(json.dumps(plan))
    inputs = DatasetFiles(str(work / "results" / "demo"))
    for block, count in plan_jobs(shards, 10):  # each shar job's records, as the plan writes them
        path = Path(inputs.shar_input(block, block_size(block), count))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"shards": []}) + "\n")


def synthesize_records(work: Path, n: int, shard_size: int) -> int:
    """The demo's record files of a finished run replaced by `n` Emilia-shaped records (benchmarks/
    bench_scale.py's corpus and writer): with_context.jsonl, and the same lines as its prepared, text,
    quality and splits records, each file keeping its modification time (nothing is out of date); then
    the shard plan made for them by its own code (sharflow.shar.plan.plan_shards: the plan and every
    shar job's inputs file, as the checkpoint writes them). The number of shards planned."""
    import os
    import shutil

    from scale.corpus import corpus, write_with_context

    from sharflow.shar.plan import plan_shards

    files = DatasetFiles(str(work / "results" / "demo"))
    paths = [files.prepared, files.text_records, files.quality_kept, files.split_records, files.with_context]
    stamps = {p: os.stat(p) for p in paths if os.path.exists(p)}
    t = time.perf_counter()
    write_with_context(corpus(n), Path(files.with_context))
    for path in stamps:
        if path != files.with_context:
            shutil.copyfile(files.with_context, path)
    for path, st in stamps.items():
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    plan = plan_shards(
        files.with_context,
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=0,
        shards_per_job=10,
        grow="rebuild",
    )
    seconds = time.perf_counter() - t
    print(f"({n:,} records and their plan synthesized in {seconds:.0f} s: {plan['num_shards']:,} shards)")
    return plan["num_shards"]


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
    parser.add_argument(
        "--records",
        type=int,
        help="instead of --shards: this many synthetic Emilia-shaped records, planned into shards of 4,096 "
        "by the plan's own code (4,500,000: 10,000 hours of Emilia)",
    )
    args = parser.parse_args()
    shard_size = 4096 if args.records else None
    with tempfile.TemporaryDirectory(prefix="bench_dag-") as tmp:
        work = Path(tmp)
        config(work, shard_size)
        floor_s, floor_mb, _ = snakemake(work, "-n")
        print(f"floor: dry run before the plan exists: {floor_s:.1f} s, {floor_mb:.0f} MB")
        t0 = time.perf_counter()
        snakemake(work, dataset_files("demo").shard_plan)
        print(f"(prepare + context + shar_plan of the demo for real: {time.perf_counter() - t0:.0f} s)")
        if args.records:
            args.shards = synthesize_records(work, args.records, shard_size)
        else:
            synthesize_plan(work, args.shards)

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
        (work / dataset_files("demo").shard(min(4321, args.shards // 2)).target).unlink()
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
