"""The cost plan against the run it predicts (issue 48): per stage, planned and measured CPU seconds.

Builds a corpus of `--copies` x the demo (each copy a speaker set of its own: the demo's 56 records
under new names and speakers, the audio the demo's own files through a symlinked folder per copy),
then in one working folder:

1. `snakemake plan`: prepares the corpus in full, runs the calibration on a `--sample` record
   sample and writes the plan;
2. `snakemake`: the real run, every job writing its cost record as the calibration's did.

It prints, per stage, the plan's CPU seconds, the run's and their ratio (the issue's bar: within
+-25 %), the disk the plan predicted against what the run wrote under results/ (+-10 %), and the
calibration's CPU against the run's (the bar: <= 5 %), its fixed part (start-up and model loads)
apart. Local profile, this machine's cores; quality, context and codes run on CPU ranks here.

With `--plan-only` it stops after the plan and prints what the plan predicts for the run and the
calibration's share of it: the calibration costs the same whatever the corpus's size, so its share on
corpora larger than a run here can afford (`--copies 200`: 11,200 records) is read from the plan, whose
accuracy the full comparison measures.

With `--against DIR` (a finished run of the same `--copies`) it makes only the plan, from its own
`--sample`, and sets it against the run in DIR: one run measures the plans of several sample sizes.

With `--long-form N` the corpus is instead N long recordings of the long-form test corpus
(benchmarks/longform/corpus.py: 2-4 of the demo's voices each, `--minutes` long) as one long_form
dataset: the plan reads their headers, the calibration segments `--sample-hours` of them (and a
quarter of those), and the plan estimates the segments' records from what those gave.

    .venv/bin/python benchmarks/bench_plan.py [--copies 20] [--sample 300] [--shard-size 64] [--plan-only]
        [--work DIR] [--against DIR] [--report-only] [--long-form 12 --minutes 3 6 --sample-hours 0.25]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo"
sys.path.insert(0, str(REPO / "src"))

from sharflow.plan.actual import compare, compare_markdown  # noqa: E402
from sharflow.plan.calibrate import RUNS  # noqa: E402
from sharflow.plan.model import read_job_costs  # noqa: E402


def build(work: Path, copies: int) -> tuple[str, str]:
    """(manifest, audio root) of the corpus."""
    root = work / "audio"
    root.mkdir(parents=True)
    lines = []
    demo = [json.loads(x) for x in (DEMO / "manifest.json").read_text().splitlines()]
    for k in range(copies):
        os.symlink(DEMO / "audio", root / f"copy{k:03d}")
        for r in demo:
            lines.append(
                json.dumps(
                    {
                        **r,
                        "audio_filepath": f"copy{k:03d}/{r['audio_filepath']}",
                        "speaker": f"{r['speaker']}_{k}",
                    }
                )
            )
    manifest = work / "manifest.json"
    manifest.write_text("\n".join(lines) + "\n")
    return str(manifest), str(root)


def build_long_form(work: Path, recordings: int, minutes: tuple[float, float]) -> tuple[None, str]:
    """(no manifest, the recordings' folder) of a long-form corpus."""
    from longform.corpus import write_corpus

    write_corpus(work / "recordings", recordings, minutes, seed=0)
    return None, str(work / "recordings")


def config(manifest: str | None, root: str, args) -> dict:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    dataset = {"manifest": manifest, "audio_root": root, "language": "en"}
    if manifest is None:
        dataset["format"] = "long_form"
    cfg["datasets"] = {"bench": dataset}
    for block in (*cfg["codecs"].values(), cfg["segment"]["asr"]):
        block["random_from_config"] = str(REPO / block["random_from_config"])
    cfg["shar"]["shard_size"] = args.shard_size
    cfg["plan"] = {"sample_records": args.sample, "sample_hours": args.sample_hours}
    return cfg


def snakemake(work: Path, configfile: Path, *targets: str) -> float:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work)]
    cmd += ["--configfile", str(configfile), "--profile", str(REPO / "profiles" / "local"), *targets]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def du(folder: Path, skip: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        if Path(dirpath).is_relative_to(skip):
            continue
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--sample", type=int, default=300)
    ap.add_argument("--shard-size", type=int, default=64)
    ap.add_argument("--work", default=None, help="working folder (default: a new temporary one)")
    ap.add_argument("--report-only", action="store_true", help="report on a finished --work folder")
    ap.add_argument("--plan-only", action="store_true", help="the plan alone: the calibration's share of it")
    ap.add_argument(
        "--against",
        default=None,
        help="a finished --work folder of the same --copies: make only the plan here (its own --sample) and "
        "set it against that folder's run",
    )
    ap.add_argument("--long-form", type=int, default=0, help="N long recordings instead of the demo copies")
    ap.add_argument("--minutes", type=float, nargs=2, default=(3.0, 6.0), help="their lengths (--long-form)")
    ap.add_argument("--sample-hours", type=float, default=0.5, help="plan.sample_hours (--long-form)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench_plan_"))
    configfile = work / "config.yaml"
    if not args.report_only:
        if args.long_form:
            manifest, root = build_long_form(work / "corpus", args.long_form, tuple(args.minutes))
        else:
            manifest, root = build(work / "corpus", args.copies)
        configfile.write_text(yaml.safe_dump(config(manifest, root, args), sort_keys=False))
    if args.plan_only:
        plan_wall = snakemake(work, configfile, "plan")
        plan = json.loads((work / "results" / "plan" / "plan.json").read_text())
        d, c, total = plan["datasets"]["bench"], plan["calibration"], plan["total"]["cpu_s"]
        per_record = total / d["records"]
        print(
            f"corpus: {d['records']} records, {d['seconds'] / 3600:.2f} h; sample {d['sample_records']}; "
            f"plan {plan_wall:.0f} s wall\nplanned run: {total:.0f} CPU-s ({per_record:.2f} a record); "
            f"calibration {c['cpu_s']:.0f} CPU-s = {100 * c['cpu_s'] / total:.1f} % of it "
            f"({c['fixed_s']:.0f} s start-up and model loads); 5 % from "
            f"{c['cpu_s'] / 0.05 / per_record:,.0f} records of this corpus's kind"
        )
        print(f"work folder: {work}")
        return
    ran = Path(args.against) if args.against else work  # the folder of the run the plan is set against
    if not args.report_only:
        plan_wall = snakemake(work, configfile, "plan")
        run = f"the run {snakemake(work, configfile):.0f} s" if not args.against else f"the run in {ran}"
        print(f"wall: plan (prepare + calibration) {plan_wall:.0f} s, {run}\n")
    plan = json.loads((work / "results" / "plan" / "plan.json").read_text())
    resources = yaml.safe_load((work / "results" / "plan" / "resources.yaml").read_text())
    result = compare(plan, resources, ran / "logs")
    d = plan["datasets"]["bench"]
    print(f"corpus: {d['records']} records, {d['seconds'] / 3600:.2f} h; sample {d['sample_records']}")
    if d.get("long_form"):
        print(long_form_line(d, ran))
    print()
    print(compare_markdown(result))
    run_total = result["total"]["measured_cpu_s"]
    disk_plan = sum(v["bytes"] for k, v in plan["disk"].items() if not k.startswith("models"))
    results = ran / "results"
    disk_run = du(results, results / "plan") - du(results / "models", ran / "none")
    print(
        f"\ndisk: plan {disk_plan / 1e6:.1f} MB, run {disk_run / 1e6:.1f} MB, "
        f"plan/run {disk_plan / disk_run:.3f}"
    )
    c = plan["calibration"]
    print(
        f"calibration: {c['cpu_s']:.1f} CPU-s = {100 * c['cpu_s'] / run_total:.1f} % of the run's "
        f"({c['fixed_s']:.1f} s of it start-up and model loads: the rest "
        f"{100 * (c['cpu_s'] - c['fixed_s']) / run_total:.1f} %); "
        f"{c['jobs']} jobs, nested run {c['wall_s']} s wall"
    )
    print(calibration_points(work, ran, plan))
    print(f"work folder: {work}")


def long_form_line(d: dict, ran: Path) -> str:
    """The long recordings' planned records and audio (estimated from the calibration's segments)
    against what the run's segment stage and prepare gave."""
    records, seconds = 0, 0.0
    with open(ran / "results" / "bench" / "prepare" / "prepared.jsonl", encoding="utf-8") as f:
        for line in f:
            records += 1
            seconds += json.loads(line)["duration"]
    return (
        f"long recordings: {d['recordings']} ({d['recording_seconds'] / 3600:.2f} h), the calibration's "
        f"{d['sample_recordings']} ({d['sample_recording_seconds'] / 3600:.2f} h) and "
        f"{d['small_recordings']}; "
        f"records planned {d['records']:,}, the run's {records:,} ({d['records'] / records:.2f}); "
        f"audio planned {d['seconds'] / 3600:.3f} h, the run's {seconds / 3600:.3f} h "
        f"({d['seconds'] / seconds:.2f})"
    )


def calibration_points(work: Path, ran: Path, plan: dict) -> str:
    """Each rule's CPU seconds in the small run, the sample run and the real run, and whether the plan
    scaled it (a rule whose cost grew by no more than noise is not: sharflow.plan.model.grew)."""
    datasets = set(plan["datasets"])
    runs = [work / "results" / "plan" / "calibration" / run / "logs" for run in RUNS] + [ran / "logs"]
    cpu = [{} for _ in runs]
    for totals, logs in zip(cpu, runs, strict=True):
        for job in read_job_costs(logs, datasets):
            totals[job.rule] = totals.get(job.rule, 0.0) + job.cpu_s
    sample, small, run = cpu
    lines = ["\n| rule | small run CPU-s | sample run | the run | scaled |", "|---|---:|---:|---:|---|"]
    for rule in sorted(set(sample) & set(small)):
        scaled = (
            "no: grew within noise"
            if rule in plan["not_grown"]
            else "no: ran in full or paid once"
            if rule in plan["not_scaled"]
            else "yes"
        )
        lines.append(
            f"| {rule} | {small[rule]:.2f} | {sample[rule]:.2f} | {run.get(rule, 0.0):.2f} | {scaled} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
