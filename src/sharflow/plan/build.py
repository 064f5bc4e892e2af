"""The plan from a finished calibration: read its measures, extrapolate (sharflow.plan.model), and
write plan.json, the page (sharflow.plan.page) and the rules' resources file."""

import json
import math
from pathlib import Path

import yaml

from sharflow.core import layout
from sharflow.core.atomic import atomic_file, read_json, write_json
from sharflow.plan.calibrate import RUNS
from sharflow.plan.critical import critical_path
from sharflow.plan.model import (
    ACTUAL,
    STAGES,
    RulePlan,
    Scale,
    disk_of,
    plan_rules,
    read_job_costs,
    resources_table,
    stage_of,
)
from sharflow.plan.page import hours, plan_dot, plan_markdown


def full_shards(calibration_results: Path, scales: dict[str, Scale], shard_size: int) -> dict[str, int]:
    """The full run's shard count per Shar set: the calibration's cuts in it, scaled by its
    dataset's records, in shards of shard_size."""
    out = {}
    for stats in sorted(calibration_results.rglob("shar_stats.json")):
        name = stats.parent.relative_to(calibration_results).as_posix()
        dataset = name.split("/")[0]
        if dataset not in scales:
            continue
        cuts = read_json(stats)["cuts"] * scales[dataset].ratio("records")
        out[name] = math.ceil(cuts / shard_size) if cuts else 0
    return out


def _prepared(folder: Path, dataset: str) -> tuple[int, float]:
    """(records, audio seconds) of a calibration run's prepared records of a dataset."""
    records, seconds = 0, 0.0
    path = folder / layout.dataset_files(dataset).prepared
    with open(path, encoding="utf-8") as f:
        for line in f:
            records += 1
            seconds += float(json.loads(line)["duration"])
    return records, seconds


def segmented_summary(summary: dict, dataset: str, sample_dir: Path, small_dir: Path) -> dict:
    """A long_form dataset's sample summary (sharflow.plan.sample.draw_recordings) with its records
    and audio seconds: those the calibration's segment stage and prepare made of its sampled
    recordings, and the full corpus's estimated from them, per second of recording."""
    sample_records, sample_seconds = _prepared(sample_dir, dataset)
    small_records, small_seconds = _prepared(small_dir, dataset)
    ratio = summary["recording_seconds"] / summary["sample_recording_seconds"] if sample_records else 0.0
    return {
        **summary,
        "records": round(sample_records * ratio),
        "seconds": round(sample_seconds * ratio, 3),
        "estimated": True,  # the full corpus's records and seconds: not counted, estimated
        "sample_records": sample_records,
        "sample_seconds": round(sample_seconds, 3),
        "small_records": small_records,
        "small_seconds": round(small_seconds, 3),
    }


def make_plan(
    *,
    calibration: str,
    logs: str,
    samples: dict[str, dict],
    config: dict,
    slots: int,
    calibration_run: dict,
) -> tuple[dict, dict]:
    """(plan, resources) from the calibration's working folder, the full run's logs (prepare's
    jobs), each dataset's sample summary (sharflow.plan.sample.Sample.as_dict), the run's config,
    how many jobs may run at once (`slots`: the profile's `jobs`) and the calibration run's record."""
    calibration_dir = Path(calibration)
    sample_dir, small_dir = (calibration_dir / run for run in RUNS)
    samples = {
        ds: segmented_summary(s, ds, sample_dir, small_dir) if s.get("long_form") else s
        for ds, s in samples.items()
    }
    scales = {ds: Scale(**{f: s.get(f, 0) for f in Scale.__dataclass_fields__}) for ds, s in samples.items()}
    datasets = set(samples)
    measured = read_job_costs(sample_dir / "logs", datasets)
    small = read_job_costs(small_dir / "logs", datasets) if (small_dir / "logs").exists() else []
    actual = read_job_costs(logs, datasets, rules=sorted(ACTUAL))
    shards = full_shards(sample_dir / "results", scales, config["shar"]["shard_size"])
    rules = plan_rules(measured, small, actual, scales, config, shards)
    stages = stage_table(rules, slots)
    total_cpu = sum(s["cpu_s"] for s in stages.values())
    disk = disk_of(sample_dir / "results", scales, datasets)
    cal_cpu = sum(j.cpu_s for j in measured + small)
    plan = {
        "datasets": samples,
        "stages": stages,
        "total": {
            "cpu_s": round(total_cpu, 1),
            "gpu_s": round(sum(s["gpu_s"] for s in stages.values()), 1),
            "wall_s": round(sum(s["wall_s"] for s in stages.values()), 1),
            "slots": slots,
        },
        "dominant": max(stages, key=lambda s: stages[s]["cpu_s"] + stages[s]["gpu_s"]) if stages else None,
        "disk": {k: {kk: round(vv) for kk, vv in v.items()} for k, v in sorted(disk.items())},
        "calibration": {
            "cpu_s": round(cal_cpu, 1),
            "fixed_s": round(sum(j.startup_cpu_s + j.load_s for j in measured + small), 1),
            "wall_s": calibration_run.get("wall_s"),
            "jobs": len(measured) + len(small),
            "share_of_plan": round(cal_cpu / total_cpu, 4) if total_cpu else None,
        },
        "critical_path": critical_path(rules),
        "knobs": knobs(rules, config),
        "not_scaled": sorted(name for name, p in rules.items() if p.driver in ("one_off", "actual")),
        "not_grown": sorted(
            name for name, p in rules.items() if p.driver in ("audio", "records") and not p.grew
        ),
        # GPU rules whose calibration jobs allocated no GPU memory ran on CPUs: their hours are CPU hours
        "gpu_rules_on_cpu": sorted(name for name, p in rules.items() if p.gpu and not p.gpu_peak_mb),
    }
    return plan, resources_table(rules, config, config["plan"]["safety"])


def stage_table(rules: dict[str, RulePlan], slots: int) -> dict[str, dict]:
    """{stage: its jobs, CPU, GPU and wall seconds, fixed CPU, peak memory, drivers and rules}, in
    the pipeline's order. A stage's wall clock: its jobs in waves of `slots`, each as long as its
    longest job."""
    stages: dict[str, dict] = {}
    for name, p in rules.items():
        st = stages.setdefault(
            stage_of(name), {**dict.fromkeys(SUMMED, 0.0), "jobs": 0, "drivers": [], "rules": {}}
        )
        st["cpu_s"] += p.cpu_s
        st["gpu_s"] += p.wall_s if p.gpu else 0.0
        st["fixed_cpu_s"] += p.fixed_cpu_s
        st["jobs"] += p.jobs
        st["wall_s"] += math.ceil(p.jobs / max(1, slots)) * p.job_wall_s
        st["peak_rss_mb"] = max(st["peak_rss_mb"], p.peak_rss_mb)
        st["gpu_peak_mb"] = max(st["gpu_peak_mb"], p.gpu_peak_mb)
        if p.driver not in st["drivers"]:
            st["drivers"].append(p.driver)
        st["rules"][name] = {
            "driver": p.driver,
            "jobs": p.jobs,
            "cpu_s": round(p.cpu_s, 1),
            "fixed_cpu_s": round(p.fixed_cpu_s, 1),
            "gpu": p.gpu,
            "job_wall_s": round(p.job_wall_s, 1),
            "peak_rss_mb": round(p.peak_rss_mb),
            "calibration_cpu_s": round(p.calibration_cpu_s, 2),
        }
    ordered = {s: stages[s] for s in STAGES if s in stages}
    for st in ordered.values():
        for key in ("cpu_s", "gpu_s", "wall_s", "fixed_cpu_s"):
            st[key] = round(st[key], 1)
    return ordered


SUMMED = ("cpu_s", "gpu_s", "wall_s", "fixed_cpu_s", "peak_rss_mb", "gpu_peak_mb")


def knobs(rules, config) -> list[str]:
    """What a setting would change, where the answer is simple: the fixed cost of the shard jobs
    against shards_per_job."""
    out = []
    for stage in ("shar", "codes"):
        p = rules.get(f"{stage}_jobs")
        if p is None or not p.jobs:
            continue
        per_job = config[stage]["shards_per_job"]
        fewer = math.ceil(p.jobs * per_job / 100)
        if per_job < 100 and fewer < p.jobs:
            saved = p.fixed_cpu_s * (1 - fewer / p.jobs)
            out.append(
                f"{stage}.shards_per_job {per_job} -> 100: {p.jobs} jobs -> "
                f"{fewer}, saves about {hours(saved)} CPU-h of start-up "
                "and model loads (each job's runtime grows to match)"
            )
    return out


def write_plan(plan: dict, resources: dict, out) -> str:
    """Write the plan's files (`out`: the cost_plan job's outputs: plan, page, dot, resources);
    the page, for the terminal."""
    write_json(out.plan, plan)
    page = plan_markdown(plan)
    with atomic_file(out.page) as f:
        f.write(page)
    with atomic_file(out.dot) as f:
        f.write(plan_dot(plan))
    with atomic_file(out.resources) as f:
        f.write(
            "# Written by the cost plan (snakemake plan): each rule's mem_mb and runtime (minutes) for one\n"
        )
        f.write("# attempt, x the attempt on a retry. Delete this file to go back to the defaults.\n")
        yaml.safe_dump(resources, f, sort_keys=True)
    return page
