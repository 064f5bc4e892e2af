"""Plan against actual: each stage's predicted cost beside what the real run's jobs measured.

After the run, `snakemake plan_vs_actual` reads the plan and every job's cost record under logs/
(the same records the calibration's jobs wrote, sharflow.core.logs.job_cost) and writes
results/plan/actual.{json,md}: per stage the planned and measured CPU seconds and their ratio, and
per rule whether its jobs stayed within the memory and time the plan asked for. One-off rules
(a model built, a grammar cached: either run may have paid it) and the plan's own jobs are left out.

On Slurm, where accounting is on, the executor plugin writes sacct's view of every job when asked
(`--slurm-efficiency-report`; the profile points its path at layout.SLURM_EFFICIENCY): each CSV there
adds, per rule, the jobs' CPU efficiency and the peak RSS sacct saw against the memory requested
(slurm_efficiency), so that what Slurm measured stands beside the jobs' own records.
"""

import glob
import os
from pathlib import Path

from sharflow.plan.model import ONE_OFF, read_job_costs, stage_of

PLAN_RULES = ("calibration_sample", "calibration", "cost_plan", "plan_vs_actual")


def measured_by_stage(logs: str | Path, datasets) -> tuple[dict[str, dict], dict[str, dict]]:
    """({stage: {cpu_s, jobs}}, {rule: {jobs, peak_rss_mb, longest_s}}) of the run's jobs."""
    stages: dict[str, dict] = {}
    rules: dict[str, dict] = {}
    for job in read_job_costs(logs, datasets):
        if job.rule in ONE_OFF or job.rule in PLAN_RULES:
            continue
        s = stages.setdefault(stage_of(job.rule), {"cpu_s": 0.0, "jobs": 0})
        s["cpu_s"] += job.cpu_s
        s["jobs"] += 1
        r = rules.setdefault(job.rule, {"jobs": 0, "peak_rss_mb": 0.0, "longest_s": 0.0})
        r["jobs"] += 1
        r["peak_rss_mb"] = max(r["peak_rss_mb"], job.peak_rss_mb)
        r["longest_s"] = max(r["longest_s"], job.job_wall_s)
    return stages, rules


def _rule_of(comment: str) -> str:
    """The rule of a Slurm job from the comment the executor gives it (`rule_<rule>[_wildcards_...]`)."""
    return comment.removeprefix("rule_").split("_wildcards_")[0]


def slurm_efficiency(folder: str | Path) -> dict[str, dict]:
    """{rule: {jobs, cpu_efficiency_pct (mean), max_rss_mb, requested_mem_mb, longest_s}} from the
    executor's efficiency reports (`efficiency_report_<run>.csv`) under `folder`; {} without any."""
    import pandas as pd

    rules: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(str(folder), "efficiency_report_*.csv"))):
        table = pd.read_csv(path)
        if "RuleName" not in table:  # a cluster whose jobs keep no comment: no rule to put it under
            continue
        for comment, rows in table.groupby(table["RuleName"].fillna("").astype(str)):
            if not comment:
                continue
            r = rules.setdefault(
                _rule_of(comment),
                {
                    "jobs": 0,
                    "cpu_efficiency_sum": 0.0,
                    "max_rss_mb": 0.0,
                    "requested_mem_mb": 0.0,
                    "longest_s": 0.0,
                },
            )
            r["jobs"] += len(rows)
            r["cpu_efficiency_sum"] += float(rows["CPU Efficiency (%)"].sum())
            r["max_rss_mb"] = max(r["max_rss_mb"], float(rows["MaxRSS_MB"].max()))
            r["requested_mem_mb"] = max(r["requested_mem_mb"], float(rows["RequestedMem_MB"].max()))
            r["longest_s"] = max(r["longest_s"], float(rows["Elapsed_sec"].max()))
    return {
        rule: {
            "jobs": r["jobs"],
            "cpu_efficiency_pct": round(r["cpu_efficiency_sum"] / r["jobs"], 1),
            **{k: round(r[k], 1) for k in ("max_rss_mb", "requested_mem_mb", "longest_s")},
        }
        for rule, r in sorted(rules.items())
    }


def compare(plan: dict, resources: dict, logs: str | Path, slurm_reports: str | Path | None = None) -> dict:
    """The plan's stages (their one-off rules left out) beside the run's, each rule's jobs against
    the resources the plan gave it, and what Slurm's accounting measured where its reports are."""
    stages, rules = measured_by_stage(logs, set(plan["datasets"]))
    out_stages = {}
    for stage in dict.fromkeys([*plan["stages"], *stages]):
        planned = plan["stages"].get(stage, {"cpu_s": 0.0, "rules": {}})
        one_off = sum(r["cpu_s"] for name, r in planned["rules"].items() if name in ONE_OFF)
        p = planned["cpu_s"] - one_off
        m = stages.get(stage, {"cpu_s": 0.0, "jobs": 0})
        out_stages[stage] = {
            "planned_cpu_s": round(p, 1),
            "measured_cpu_s": round(m["cpu_s"], 1),
            "ratio": round(p / m["cpu_s"], 3) if m["cpu_s"] else None,
            "measured_jobs": m["jobs"],
        }
    fits = {}
    for rule, r in sorted(rules.items()):
        if rule in resources:
            asked = resources[rule]
            fits[rule] = {
                **{k: round(v, 1) for k, v in r.items()},
                "mem_mb": asked["mem_mb"],
                "runtime_min": asked["runtime"],
                "fits": r["peak_rss_mb"] <= asked["mem_mb"] and r["longest_s"] <= 60 * asked["runtime"],
            }
    planned_total = sum(s["planned_cpu_s"] for s in out_stages.values())
    measured_total = sum(s["measured_cpu_s"] for s in out_stages.values())
    return {
        "stages": out_stages,
        "total": {
            "planned_cpu_s": round(planned_total, 1),
            "measured_cpu_s": round(measured_total, 1),
            "ratio": round(planned_total / measured_total, 3) if measured_total else None,
        },
        "resources": fits,
        "slurm": slurm_efficiency(slurm_reports) if slurm_reports else {},
    }


def compare_markdown(result: dict) -> str:
    lines = [
        "# Plan against actual",
        "",
        "| stage | planned CPU-s | measured CPU-s | planned / measured | jobs run |",
        "|---|---:|---:|---:|---:|",
    ]
    for stage, s in result["stages"].items():
        ratio = f"{s['ratio']:.2f}" if s["ratio"] is not None else "n/a"
        cpu = f"{s['planned_cpu_s']:,.1f} | {s['measured_cpu_s']:,.1f}"
        lines.append(f"| {stage} | {cpu} | {ratio} | {s['measured_jobs']} |")
    t = result["total"]
    ratio = f"{t['ratio']:.2f}" if t["ratio"] is not None else "n/a"
    lines.append(f"| **total** | {t['planned_cpu_s']:,.1f} | {t['measured_cpu_s']:,.1f} | {ratio} | |")
    over = [rule for rule, r in result["resources"].items() if not r["fits"]]
    lines += ["", "| rule | jobs | peak RSS | asked | longest job | asked |"]
    lines.append("|---|---:|---:|---:|---:|---:|")
    for rule, r in result["resources"].items():
        lines.append(
            f"| {rule} | {r['jobs']:.0f} | {r['peak_rss_mb']:,.0f} MB | {r['mem_mb']:,} MB | "
            f"{r['longest_s']:,.0f} s | {r['runtime_min']} min |"
        )
    if result.get("slurm"):
        lines += [
            "",
            "What Slurm's accounting saw (sacct, the executor's efficiency report):",
            "",
            "| rule | jobs | CPU efficiency | peak RSS | requested | longest job |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for rule, r in result["slurm"].items():
            lines.append(
                f"| {rule} | {r['jobs']} | {r['cpu_efficiency_pct']:.0f} % | {r['max_rss_mb']:,.0f} MB | "
                f"{r['requested_mem_mb']:,.0f} MB | {r['longest_s']:,.0f} s |"
            )
    lines += [
        "",
        "Every job stayed within what the plan asked for."
        if not over
        else f"Over what the plan asked for: {', '.join(over)}. Make the plan again (a larger "
        "plan.sample_records, or plan.safety).",
    ]
    return "\n".join(lines) + "\n"
