"""Plan against actual: each stage's predicted cost beside what the real run's jobs measured.

After the run, `snakemake plan_vs_actual` reads the plan and every job's cost record under logs/
(the same records the calibration's jobs wrote, sharflow.core.logs.job_cost) and writes
results/plan/actual.{json,md}: per stage the planned and measured CPU seconds and their ratio, and
per rule whether its jobs stayed within the memory and time the plan asked for. One-off rules
(a model built, a grammar cached: either run may have paid it) and the plan's own jobs are left out.
"""

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


def compare(plan: dict, resources: dict, logs: str | Path) -> dict:
    """The plan's stages (their one-off rules left out) beside the run's, and each rule's jobs
    against the resources the plan gave it."""
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
    lines += [
        "",
        "Every job stayed within what the plan asked for."
        if not over
        else f"Over what the plan asked for: {', '.join(over)}. Make the plan again (a larger "
        "plan.sample_records, or plan.safety).",
    ]
    return "\n".join(lines) + "\n"
