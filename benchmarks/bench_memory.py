"""Peak memory of each job as the dataset grows, and of a shard job as its shards grow.

Both datasets go through the real workflow (local profile, prepare → context → shar, no codes) in
one run. Each job's log ends with its exact peak RSS (getrusage: the job process, and the largest
of its worker processes); Snakemake's `benchmark:` max_rss is sampled and misses short jobs. A
stage whose memory does not grow with the dataset shows a 10x / 1x ratio near 1. Shards hold 64
cuts in both, so shard jobs do the same work per job (1 shard vs 9).

Then the shard jobs alone (sharflow.shar.shard, sharflow.codes.shard), each in a fresh process: its
peak RSS from getrusage, and from VmHWM reset after the imports. One shar job of a shard of 64 cuts,
of a block of 10 such shards, and of one shard of `--shard-cuts` (4,096 by default, real data's
`shar.shard_size`); one codes job (the tiny random NeMo codec, one CPU rank) of a shard of 64 cuts
and of `--codes-cuts`. A cost plan measures its shard jobs on the sample's shards (a few hundred
cuts at most); these figures say how much more a job of real shards needs.

Last, a context part (one part, one CPU rank, GE2E) over the demo repeated `--context-copies` times,
in a fresh process each: its groups are speakers, so every copy makes each group larger (8 records
at x1, 320 at x40) as well as the part.

    .venv/bin/python benchmarks/bench_memory.py [--copies 10] [--shard-cuts 4096] [--codes-cuts 512]
                                                [--context-copies 1 10 40]
"""

import argparse
import json
import math
import multiprocessing
import re
import resource
import subprocess
import tempfile
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml
from _corpus import proc_status_mb, repeated_demo, repeated_with_context, snakemake_command

REPO = Path(__file__).resolve().parents[1]
RULES = ("prepare", "context_plan", "context_part", "context_merge", "shar_plan", "shar jobs", "shar_merge")
SHAR_JOBS = ("shar_block", "shar_tail", "shar_shard")  # one rule per kind of block (work.jobs): "shar jobs"


def peak_rss(work: Path, dataset: str) -> dict[str, float]:
    """Largest peak RSS (MB, job process or a worker, whichever is larger) over each rule's jobs."""
    out: dict[str, float] = defaultdict(float)
    for log in (work / "logs").rglob("*.log"):
        rel = log.relative_to(work / "logs").parts  # <rule>/<dataset>.log or <rule>/<dataset>/...
        rule = "shar jobs" if rel[0].startswith(SHAR_JOBS) else rel[0]
        if rule in RULES and rel[1].split(".")[0] == dataset:
            found = re.search(r"peak RSS (\d+) MB, largest worker process (\d+) MB", log.read_text())
            if found:
                out[rule] = max(out[rule], *map(float, found.groups()))
    return out


def _peak_mb() -> float:
    """Peak RSS (MB) of this process and of the largest child it waited for, whichever is larger."""
    return (
        max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
        / 1024
    )


def _reset_peak() -> None:
    """Start this process's VmHWM again from its current RSS (Linux: clear_refs 5), after the imports."""
    Path("/proc/self/clear_refs").write_text("5")


def _job_peak(job) -> tuple[float, float, int]:
    """(process peak RSS MB, peak RSS MB while `job` ran, cuts) of job(): its modules imported first."""
    _reset_peak()
    cuts = job()
    return _peak_mb(), proc_status_mb("VmHWM"), cuts


def _shar_job(folder: str, root: str) -> tuple[float, float, int]:
    """_job_peak of writing every shard of the plan at `folder` (one job: shards_per_job)."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.shar.audio import EncodeSettings
    from sharflow.shar.shard import write_planned

    return _job_peak(
        lambda: sum(s["cuts"] for s in write_planned(DatasetFiles(folder), EncodeSettings(audio_root=root)))
    )


def _codes_job(folder: str, codec: str) -> tuple[float, float, int]:
    """_job_peak of one codes job over shard 0 at `folder` (the tiny codec, one CPU rank), its codec
    loaded first (a model's size is not the shard's)."""
    from sharflow.codes.shard import ShardCodes, encode_shards
    from sharflow.codes.spec import CodecSpec, cached_codec
    from sharflow.core.layout import DatasetFiles

    files = DatasetFiles(folder)
    spec = CodecSpec(name="tiny", backend="nemo", model=codec)
    cached_codec(spec, "cpu")
    job = ShardCodes(0, files.shard(0).target, files.shard(0).context, files.codes("tiny", 0))
    return _job_peak(
        lambda: sum(
            s["cuts"] for s in encode_shards([job], codec=spec, batch_seconds=60.0, device="cpu", workers=1)
        )
    )


def in_fresh_process(fn, *args) -> tuple[float, float, int]:
    """fn(*args) in a new spawned process: its peak memory is that job's alone."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def plan_first(with_context: Path, folder: Path, records: int, shard_size: int, per_job: int) -> str:
    """A shard plan of the first `records` of `with_context` at `folder`; the folder."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.shar.plan import plan_shards

    folder.mkdir(parents=True)
    lines = with_context.read_text().splitlines(keepends=True)[:records]
    (folder / "with_context.jsonl").write_text("".join(lines))
    files = DatasetFiles(str(folder))
    plan_shards(
        str(folder / "with_context.jsonl"),
        plan=files.shard_plan,
        inputs_dir=files.shar_inputs,
        shard_size=shard_size,
        seed=0,
        shards_per_job=per_job,
    )
    return str(folder)


def shard_jobs(tmp: Path, shard_cuts: int, codes_cuts: int) -> None:
    """Peak RSS of shar and codes jobs as their shards grow (see the module's docstring)."""
    from sharflow.models.codecs.nemo import build_random_codec

    with_context, root, records = repeated_with_context(tmp, math.ceil(max(shard_cuts, 640) / 56))
    rows = []
    jobs = [("shar, 1 shard of 64", 64, 64, 1), ("shar, a block of 10 x 64", 640, 64, 10)]
    if shard_cuts != 64:  # else the first row is that job
        jobs.append((f"shar, 1 shard of {shard_cuts}", shard_cuts, shard_cuts, 1))
    for name, n, size, per_job in jobs:
        folder = plan_first(with_context, tmp / f"shar{n}-{per_job}", n, size, per_job)
        rows.append((name, *in_fresh_process(_shar_job, folder, str(root))))
    if codes_cuts:
        codec = str(build_random_codec(REPO / "config" / "models" / "tiny_codec.yaml", tmp / "codec.nemo"))
        for n in (64, codes_cuts):
            folder = tmp / f"shar{n}-1"  # the shar rows' shard when they made one of n cuts
            if not folder.exists():
                in_fresh_process(_shar_job, plan_first(with_context, folder, n, n, 1), str(root))
            rows.append((f"codes, 1 shard of {n}", *in_fresh_process(_codes_job, str(folder), codec)))
    print(f"\nshard jobs, peak RSS (MB) as their shards grow ({len(records)} records of demo audio)")
    print(
        "(process: the job's process as a scheduler sees it; job: while the job ran, imports and model done)"
    )
    print(f"{'job':<28}{'cuts':>8}{'process':>10}{'job':>8}{'job MB per 1,000 cuts over 64':>32}")
    base: dict[str, float] = {}  # each kind's job of 64 cuts
    for name, process, job, cuts in rows:
        kind = name.split(",")[0]
        base.setdefault(kind, job)
        extra = f"{(job - base[kind]) / (cuts - 64) * 1000:.1f}" if cuts > 64 else "-"
        print(f"{name:<28}{cuts:>8}{process:>10.0f}{job:>8.0f}{extra:>32}")


def _context_part(tmp: str, copies: int) -> tuple[float, float, int, int]:
    """(process peak RSS MB, peak RSS MB while the context stage ran, records, largest group) of the
    demo `copies` times, prepared first (its modules imported before the reset); the groups are the
    context plan's."""
    from _corpus import context_stage, prepare

    # imported before the peak's reset: their size is not the part's
    import sharflow.context.part
    import sharflow.models.speaker_embedders  # noqa: F401

    manifest, root = repeated_demo(Path(tmp) / f"x{copies}", copies, link=True)
    files, _ = prepare(Path(tmp) / f"x{copies}" / "dataset", manifest, root)
    _reset_peak()
    context_stage(files, audio_root=root, workers=1)
    process, job = _peak_mb(), proc_status_mb("VmHWM")
    sizes = [group["n"] for group in json.loads(Path(files.context_plan).read_text())["groups"].values()]
    return process, job, sum(sizes), max(sizes)


def context_parts(tmp: Path, copies: list[int]) -> None:
    """Peak RSS of a context part as it and its groups grow (see the module's docstring)."""
    print("\ncontext part (one CPU rank), peak RSS (MB) as its groups grow")
    print(f"{'copies':<8}{'records':>9}{'largest group':>15}{'process':>10}{'job':>8}")
    for n in copies:
        process, job, records, group = in_fresh_process(_context_part, str(tmp), n)
        print(f"x{n:<7}{records:>9}{group:>15}{process:>10.0f}{job:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--shard-cuts", type=int, default=4096)
    parser.add_argument("--codes-cuts", type=int, default=512, help="0: no codes jobs")
    parser.add_argument("--context-copies", type=int, nargs="*", default=[1, 10, 40], help="none: skip")
    parser.add_argument("--skip-workflow", action="store_true", help="the shard and context jobs alone")
    args = parser.parse_args()
    if not args.skip_workflow:
        workflow_jobs(args.copies)
    with tempfile.TemporaryDirectory(prefix="bench_memory-") as tmp:
        shard_jobs(Path(tmp), args.shard_cuts, args.codes_cuts)
    if args.context_copies:
        with tempfile.TemporaryDirectory(prefix="bench_memory-") as tmp:
            context_parts(Path(tmp), args.context_copies)


def workflow_jobs(copies: int) -> None:
    """Peak RSS per rule of the demo 1x and `copies`x through the workflow, prepare to shar."""
    with tempfile.TemporaryDirectory(prefix="bench_memory-") as tmp:
        work = Path(tmp)
        cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        cfg["datasets"] = {}
        for name, times in (("x1", 1), (f"x{copies}", copies)):
            manifest, root = repeated_demo(work / "inputs" / name, times, link=True)
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
            f"peak RSS per job (MB), {records['x1']} vs {records[f'x{copies}']} cuts; ratio "
            "should stay near 1"
        )
        print(f"{'rule':<15}{'1x':>10}{f'{copies}x':>10}{'ratio':>8}")
        for rule in RULES:
            if rule in small and rule in large:
                print(f"{rule:<15}{small[rule]:>10.0f}{large[rule]:>10.0f}{large[rule] / small[rule]:>8.2f}")


if __name__ == "__main__":
    main()
