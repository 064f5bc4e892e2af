"""The plan as people read it: a Markdown page (results/plan/plan.md) and the same table in the terminal,
the stages a dry run prints, and the plan as a picture."""

from sharflow.plan.model import NOISE_FRACTION, NOISE_S
from sharflow.plan.resources import MIN_RUNTIME

# NeMo's step-4 script (scripts/magpietts: codes of target and context audio) against sharflow's codes
# stage over the same audio on one H200: 427 and 981 audio-s a GPU-second (sharflow's codes 2.3x NeMo's).
# NeMo's codes alone cost the codes stage's GPU-hours times their ratio.
NEMO_STEP4_AUDIO_S_PER_GPU_S = 427.0
CODES_AUDIO_S_PER_GPU_S = 981.0
TARGET_HOURS = 10_000  # the corpus the GPU bill is scaled to


def gpu_bill(plan: dict) -> dict | None:
    """The plan's GPU-hours by GPU stage, for the corpus and scaled to TARGET_HOURS of audio at the
    same rates, beside what NeMo's step-4 script spends on codes alone (the codes stage's hours at
    NeMo's rate); None without audio."""
    audio_s = sum(d["seconds"] for d in plan.get("datasets", {}).values())
    if not audio_s:
        return None
    scale = TARGET_HOURS * 3600 / audio_s
    stages = {stage: s["gpu_s"] / 3600 for stage, s in plan["stages"].items() if s["gpu_s"]}
    nemo = stages.get("codes", 0.0) * CODES_AUDIO_S_PER_GPU_S / NEMO_STEP4_AUDIO_S_PER_GPU_S
    return {
        "audio_hours": audio_s / 3600,
        "stages": stages,
        "gpu_hours": sum(stages.values()),
        "at_target": {stage: h * scale for stage, h in stages.items()},
        "gpu_hours_at_target": sum(stages.values()) * scale,
        "nemo_codes_hours": nemo,
        "nemo_codes_hours_at_target": nemo * scale,
        "measured_on_cpu": bool(plan.get("gpu_rules_on_cpu")),
    }


def bill_lines(plan: dict) -> list[str]:
    """The GPU bill as the page says it: the one pass, this corpus, 10,000 hours, NeMo's codes alone."""
    bill = gpu_bill(plan)
    if bill is None:
        return []
    per_stage = ", ".join(f"{stage} {hours(h * 3600)}" for stage, h in bill["at_target"].items())
    lines = [
        "",
        "## The GPU bill",
        "",
        "One pass over the audio: each quality part decodes a record once and runs every per-utterance "
        "model on it (DNSMOS, the VAD, the context embedder, with splits the voices); the context parts "
        "read its embeddings on CPU, the identity stage its fingerprints.",
        "",
        f"| | this corpus ({bill['audio_hours']:,.1f} h of audio) | {TARGET_HOURS:,} h of audio |",
        "|---|---:|---:|",
        f"| sharflow, every GPU stage | {hours(bill['gpu_hours'] * 3600)} GPU-h | "
        f"**{hours(bill['gpu_hours_at_target'] * 3600)} GPU-h** ({per_stage}) |",
        f"| NeMo's step-4 script, codes alone (the codes stage's GPU-h x {CODES_AUDIO_S_PER_GPU_S:.0f} / "
        f"{NEMO_STEP4_AUDIO_S_PER_GPU_S:.0f}: the two's audio-s a GPU-s on one H200) | "
        f"{hours(bill['nemo_codes_hours'] * 3600)} GPU-h | "
        f"{hours(bill['nemo_codes_hours_at_target'] * 3600)} GPU-h |",
    ]
    if bill["measured_on_cpu"]:
        lines += [
            "",
            "The calibration ran its GPU rules on CPUs here: these GPU-hours are CPU hours at CPU speed, not "
            "comparable with NeMo's GPU figure. Calibrate through the profile that gives them GPUs.",
        ]
    return lines


def hours(seconds: float) -> str:
    """Hours to two decimals; a small stage's (under 18 s, which would read 0.00) to three, or <0.001."""
    h = seconds / 3600
    if h <= 0 or h >= 0.005:
        return f"{h:,.2f}"
    return f"{h:.3f}" if h >= 0.0005 else "<0.001"


def size(n: float) -> str:
    """Bytes in decimal units: 950 B, 41.2 KB, ..., TB at most."""
    if n < 1000:
        return f"{n:,.0f} B"
    for unit in ("KB", "MB", "GB"):
        n /= 1000
        if n < 1000:
            return f"{n:,.1f} {unit}"
    return f"{n / 1000:,.1f} TB"


def plan_markdown(plan: dict) -> str:
    lines = ["# Cost plan", ""]
    lines.append("| dataset | records | audio hours | sample records | sample hours |")
    lines.append("|---|---:|---:|---:|---:|")
    for name, d in plan["datasets"].items():
        about = "~" if d.get("estimated") else ""
        lines.append(
            f"| {name} | {about}{d['records']:,} | {about}{hours(d['seconds'])} | {d['sample_records']:,} | "
            f"{hours(d['sample_seconds'])} |"
        )
    lines += segmented_lines(plan)
    lines += stage_rows(plan)
    lines += ["", critical_line(plan, bold=True)]
    lines += [
        "",
        f"Most of the bill: **{plan['dominant']}**.",
        "",
        "| disk | calibration | full run |",
        "|---|---:|---:|",
    ]
    for kind, d in plan["disk"].items():
        lines.append(f"| {kind} | {size(d['calibration_bytes'])} | {size(d['bytes'])} |")
    return "\n".join(lines + bill_lines(plan) + notes(plan)) + "\n"


def segmented_lines(plan: dict) -> list[str]:
    """What the long_form datasets' records (~) were estimated from: the segments the calibration
    cut from a sample of their recordings."""
    lines = []
    for name, d in plan["datasets"].items():
        if not d.get("long_form"):
            continue
        per_hour = d["sample_records"] / (d["sample_recording_seconds"] / 3600) if d["sample_records"] else 0
        lines += [
            "",
            f"~ {name} is long recordings: {d['recordings']:,} of them, {hours(d['recording_seconds'])} "
            f"hours. The calibration segmented {d['sample_recordings']:,} "
            f"({hours(d['sample_recording_seconds'])} hours; the small run {d['small_recordings']:,}) into "
            f"{d['sample_records']:,} records, {per_hour:,.0f} a recording-hour: its records and audio "
            "hours are estimated at that rate, and its segment stage is planned per hour of recordings.",
        ]
    return lines


def stage_rows(plan: dict) -> list[str]:
    """The page's table of stages, with the total."""
    slots = plan["total"]["slots"]
    lines = [
        "",
        f"Per stage, extrapolated from the calibration run (wall clock with {slots} job(s) at once):",
        "",
        "| stage | jobs | CPU-hours | GPU-hours | wall hours | fixed CPU-h | peak RSS per job | "
        "peak GPU memory | scaled by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for stage, s in plan["stages"].items():
        gpu = " (GPU)" if s["gpu_s"] else ""
        cells = [
            f"{stage}{gpu}",
            f"{s['jobs']:,}",
            *(hours(s[k]) for k in ("cpu_s", "gpu_s", "wall_s", "fixed_cpu_s")),
            f"{s['peak_rss_mb']:,.0f} MB",
            f"{s['gpu_peak_mb']:,.0f} MB",
            ", ".join(s["drivers"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    t = plan["total"]
    totals = " | ".join(f"**{hours(t[k])}**" for k in ("cpu_s", "gpu_s", "wall_s"))
    lines.append(f"| **total** | | {totals} | | | | |")
    return lines


def notes(plan: dict) -> list[str]:
    """What the calibration cost, and what the plan did not scale or could not measure."""
    c = plan["calibration"]
    share = f"{100 * c['share_of_plan']:.1f} %" if c["share_of_plan"] is not None else "n/a"
    lines = [
        "",
        f"The calibration ran {c['jobs']} jobs: {c['cpu_s']:,.1f} CPU-s ({share} of the plan's CPU), "
        f"of which {c['fixed_s']:,.1f} s were start-up and model loads.",
    ]
    if plan["not_scaled"]:
        lines += [
            "",
            "Not scaled (measured once, paid once): "
            + ", ".join(plan["not_scaled"])
            + ". Prepare ran on every "
            "record already (a long_form dataset's segment plan on every recording's header); a model "
            "built or a grammar cached is paid once per run or cache.",
        ]
    if plan.get("not_grown"):
        lines += [
            "",
            "Planned per job at the sample's cost, not scaled, because their cost grew by no more than "
            f"noise ({NOISE_S} s or {100 * NOISE_FRACTION:.0f} %) from the small sample to the sample: "
            f"{', '.join(plan['not_grown'])}. What their records add is too little to measure in a sample; "
            "on a far larger corpus they may take longer than planned (each job still asks for at least "
            f"{MIN_RUNTIME} minutes).",
        ]
    if plan["gpu_rules_on_cpu"]:
        lines += [
            "",
            f"Ran without a GPU in the calibration: {', '.join(plan['gpu_rules_on_cpu'])}. Their "
            "GPU-hours are the hours their jobs would hold a GPU at the speed measured here, on CPUs: "
            "calibrate through the profile that gives them GPUs for GPU figures.",
        ]
    lines += [
        "",
        "Memory is each rule's measured peak, not scaled: every stage's memory is bounded by design.",
    ]
    if plan["knobs"]:
        lines += ["", "What a setting would change:", ""] + [f"- {k}" for k in plan["knobs"]]
    return lines


def plan_summary(plan: dict) -> str:
    """The plan's stages as a dry run prints them: jobs, CPU- and GPU-hours, GPU stages marked."""
    lines = ["sharflow: the cost plan (results/plan/plan.md): every stage of the run, its jobs and cost"]
    lines.append(f"  {'stage':<16}{'jobs':>8}{'CPU-h':>10}{'GPU-h':>10}{'wall h':>10}")
    for stage, s in plan["stages"].items():
        name = f"{stage} (GPU)" if s["gpu_s"] else stage
        figures = "".join(f"{hours(s[k]):>10}" for k in ("cpu_s", "gpu_s", "wall_s"))
        lines.append(f"  {name:<16}{s['jobs']:>8,}{figures}")
    t = plan["total"]
    lines.append(
        f"  {'total':<16}{'':>8}{hours(t['cpu_s']):>10}{hours(t['gpu_s']):>10}{hours(t['wall_s']):>10}"
    )
    lines.append("  " + critical_line(plan))
    bill = gpu_bill(plan)
    if bill is not None:
        cpu = " (measured on CPUs: not GPU figures)" if bill["measured_on_cpu"] else ""
        lines.append(
            f"  GPU bill at {TARGET_HOURS:,} h of audio: {hours(bill['gpu_hours_at_target'] * 3600)} GPU-h "
            f"for every GPU stage (one pass over the audio){cpu}; NeMo's step-4 script, codes alone: "
            f"{hours(bill['nemo_codes_hours_at_target'] * 3600)} GPU-h"
        )
    return "\n".join(lines)


def critical_line(plan: dict, bold: bool = False) -> str:
    """The critical path in a line (sharflow.plan.critical): its hours, its longest job, its steps."""
    path = plan.get("critical_path")
    if not path or not path["steps"]:
        return "critical path: not planned (a plan made before sharflow planned it: run plan again)"
    total = f"**{hours(path['wall_s'])} h**" if bold else f"{hours(path['wall_s'])} h"
    longest = dict(path["steps"])[path["longest"]]
    return (
        f"critical path: {total} of jobs that run one after another whatever the cluster; the longest "
        f"is {path['longest']} ({hours(longest)} h). "
        + " -> ".join(f"{rule} {hours(wall)}" for rule, wall in path["steps"])
    )


def most_shards(records: int, sets: int, shard_size: int) -> int:
    """The most shards `records` records can make over `sets` Shar sets (a dataset's train set and its
    held-out splits'; every set's last shard may be part-full, an empty set has none)."""
    if records <= 0:
        return 0
    return min(records, (records + min(sets, records) * (shard_size - 1)) // shard_size)


def most_jobs(shards: int, sets: int, per_job: int) -> int:
    """The most shard jobs (sharflow.work.jobs.plan_jobs) that `shards` shards over `sets` Shar sets
    make at `per_job` shards a job: every job but a set's last makes at least 10 shards (or a full
    block), so at most ceil(s/10) a set, and at most s // per_job full blocks plus, per set, nine
    blocks of each smaller size and one tail."""
    if shards <= 0:
        return 0
    if per_job == 1:
        return shards
    nonempty = min(sets, shards)
    smaller_sizes = len(str(per_job)) - 2  # block sizes between 10 and per_job
    by_tens = (shards + 9 * nonempty) // 10
    by_blocks = shards // per_job + nonempty * (9 * smaller_sizes + 1)
    return min(shards, by_tens, by_blocks)


def shard_jobs_summary(
    rows: list[dict], shard_size: int, per_job: dict[str, int], codecs: list[str], gpu_rules: str = ""
) -> str:
    """What a dry run cannot count before the shard plan (a checkpoint) exists: the most shar and codes
    jobs per dataset and codec, from each dataset's most records (`rows`: dataset, records or None,
    where the figure comes from, its Shar sets), the GPU rules marked (`gpu_rules`: a line on the
    GPU rules of the run's other counts)."""
    lines = [
        "sharflow: the shar and codes jobs come after the shard plan (a checkpoint), so Snakemake's job "
        "counts below leave them out. The most the run can make, from what the corpus holds "
        "(the quality filter and the splits only take records away):",
        f"  {'dataset':<16}{'records':>12}  {'from':<22}{'Shar sets':>10}{'shards':>9}{'shar jobs':>11}"
        + "".join(f"  codes[{c}] (GPU)" for c in codecs),
    ]
    for row in rows:
        if row["records"] is None:
            lines.append(f"  {row['dataset']:<16}{'?':>12}  {row['source']}")
            continue
        shards = most_shards(row["records"], row["sets"], shard_size)
        shar = most_jobs(shards, row["sets"], per_job["shar"])
        codes = most_jobs(shards, row["sets"], per_job["codes"])
        lines.append(
            f"  {row['dataset']:<16}{row['records']:>12,}  {row['source']:<22}{row['sets']:>10}{shards:>9,}"
            f"{shar:>11,}" + "".join(f"  {codes:>{len(f'codes[{c}] (GPU)')},}" for c in codecs)
        )
    if gpu_rules:
        lines.append(f"  {gpu_rules}")
    lines.append(
        "  `snakemake plan` gives the calibrated bill: every stage's jobs, CPU- and GPU-hours (docs: cost)"
    )
    return "\n".join(lines)


def plan_dot(plan: dict) -> str:
    """The plan as a picture, top to bottom: one node per stage with its jobs and hours (GPU stages
    filled), an edge from each stage to the next. For sharflow.report.dag or Graphviz's dot."""
    lines = [
        "digraph plan {",
        "    rankdir=TB;",
        '    node [shape=box, style="rounded,filled", fillcolor=white];',
    ]
    names = list(plan["stages"])
    for i, stage in enumerate(names):
        s = plan["stages"][stage]
        gpu = s["gpu_s"] > 0
        label = f"{stage}{' (GPU)' if gpu else ''}\\n{s['jobs']:,} jobs\\n{hours(s['cpu_s'])} CPU-h"
        if gpu:
            label += f", {hours(s['gpu_s'])} GPU-h"
        fill = ', fillcolor="#cfe2f3"' if gpu else ""
        lines.append(f'    n{i} [label="{label}"{fill}];')
    lines += [f"    n{i} -> n{i + 1};" for i in range(len(names) - 1)]
    return "\n".join([*lines, "}"]) + "\n"
