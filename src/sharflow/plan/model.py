"""The cost plan: what the calibration run measured, extrapolated to the whole corpus.

Every job writes its cost record beside its log (sharflow.core.logs.job_cost: start-up seconds,
wall and CPU seconds, peak RSS and GPU memory, model load seconds). A job's cost is split in two:

- **fixed**: paid once per job whatever its size: the process's start-up, imports, model loads,
  a report's figures;
- **per unit**: proportional to what drives the rule (driver_of): a dataset's audio seconds (the
  model and audio stages) or its records (the stages over record files); a long_form dataset's
  segment stage, its seconds of recordings. `one_off` rules (a model built, a grammar cached) and
  `actual` ones (prepare, which ran on every record already) are not scaled. A long_form dataset's
  records and audio seconds are estimated from the segments the calibration cut from its sampled
  recordings.

The calibration runs every job twice, on the sample and on a quarter of it (the small sample):
the line through the two (fit_line) gives both parts, per rule and dataset. A rule's predicted
cost is its full-run job count times the fixed part plus the per-unit part times the full
corpus's units, per dataset (the sample keeps the corpus's mix of durations, sharflow.plan.sample).
A rule whose cost grew by no more than noise between the two runs (the merges, the cards, the
report's figures) is planned per job at the sample's cost, and the plan names it (RulePlan.grew).
Memory is the calibration's peak plus, for a job that sees a whole dataset, a part per record
(RSS_PER_RECORD, measured by benchmarks/bench_scale.py from 10^4 to 10^6 records: predicted_peak_mb).
The calibration's two runs cannot show that part: 225 records more at ~200 bytes each is ~45 KB,
under the few MB a process's peak varies by between runs; a line through them would scale that
noise by the corpus (16 MB over 225 records is 320 GB at 4.5 M). The other rules' memory is bounded
by design (a shard, a batch, a part's buffers): their peak is the calibration's.
"""

import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from sharflow.core.atomic import read_json
from sharflow.core.logs import COST_SUFFIX
from sharflow.plan.resources import planned_figures
from sharflow.work.jobs import job_kinds

SHARD_RULE = re.compile(r"^(shar|codes)_(block\d*|tail\d|shard)$")
# run in full before the calibration: measured, not extrapolated (a long_form dataset's segment plan;
# its prepare and segment jobs run on the calibration's sample instead: SEGMENTED)
ACTUAL = {"prepare", "recipe", "segment_plan"}
ONE_OFF = {"text_normalizer", "build_random_asr", "build_random_codec", "codec_model"}
AUDIO = {"quality_part", "quality_part_cpu", "identity_part", "context_part", "verify"}
PART_RULES = {  # rule: (config section, its key of the part count)
    "segment_part": ("segment", "parts"),
    "text_part": ("text", "parts"),
    "quality_part": ("quality", "parts"),
    "quality_part_cpu": ("quality", "parts"),
    "context_part": ("context", "parts"),
    "identity_part": ("identity", "parts"),
    "identity_check": ("identity", "check_parts"),
}
GPU_RULES = {"quality_part", "context_part", "segment_part"}  # and the codes jobs (SHARD_RULE, codes_)
STAGES = (
    "segment",
    "prepare",
    "text",
    "quality",
    "identity",
    "splits",
    "context",
    "shar",
    "codes",
    "dataset",
    "verify",
    "report",
)
_STAGE_OF = {
    "recipe": "prepare",
    "build_random_asr": "quality",
    "build_random_codec": "codes",
    "codec_model": "codes",
    "catalog": "dataset",
    "dataset_card": "dataset",
    "buckets": "dataset",
    "input_cfg": "dataset",
    "validation_ds": "dataset",
    "evaluation_set": "dataset",
    "publish": "report",
}


def stage_of(rule: str) -> str:
    if rule in _STAGE_OF:
        return _STAGE_OF[rule]
    head = rule.split("_")[0]
    return head if head in STAGES else "report"


# A long_form dataset's rules that the calibration runs on its sampled recordings (its segment plan
# alone ran in full): the segment stage by seconds of recordings, prepare by the segments it reads
SEGMENTED = {"segment_part": "recordings", "segment_merge": "recordings", "prepare": "records"}


def driver_of(rule: str, segmented: bool = False) -> str:
    """What a rule's variable cost follows: audio (seconds), records, recordings (seconds of a
    long_form dataset's recordings), one_off or actual. `segmented`: for a long_form dataset's jobs."""
    if segmented and rule in SEGMENTED:
        return SEGMENTED[rule]
    if rule in ACTUAL:
        return "actual"
    if rule in ONE_OFF:
        return "one_off"
    return "audio" if rule in AUDIO or SHARD_RULE.match(rule) else "records"


def dataset_driver(rule: str, dataset: str | None, scales: dict[str, "Scale"]) -> str:
    """driver_of a rule's jobs of one dataset (None: over all of them), a long_form dataset's as such."""
    return driver_of(rule, dataset in scales and scales[dataset].long_form)


def is_gpu_rule(rule: str, config: dict | None = None) -> bool:
    """Whether a rule's jobs hold a GPU on a cluster (the codes jobs: each kind, and all as one). With
    the run's `config`: context_part only with quality off (with quality on, the quality parts embed
    every record in their one pass and the context parts only read the rows, on CPU)."""
    if rule == "codes_jobs":
        return True
    if rule == "context_part" and config is not None and config["quality"]["enabled"]:
        return False
    return rule in GPU_RULES or (bool(SHARD_RULE.match(rule)) and rule.startswith("codes_"))


@dataclass(frozen=True)
class JobCost:
    """One finished job's cost record, with its rule and the dataset its log names (None: all)."""

    rule: str
    dataset: str | None
    startup_s: float
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    gpu_peak_mb: float
    load_s: float
    startup_cpu_s: float = 0.0

    @property
    def fixed_s(self) -> float:
        return self.startup_s + self.load_s

    @property
    def job_wall_s(self) -> float:
        return self.startup_s + self.wall_s


def read_job_costs(logs: str | Path, datasets, rules=None) -> list[JobCost]:
    """Every cost record under a logs folder (logs/<rule>[/<key>...].cost.json), in path order; only
    those of `rules` where given."""
    out = []
    logs = Path(logs)
    if rules is None:
        paths = logs.rglob(f"*{COST_SUFFIX}")
    else:
        paths = [p for r in rules for p in [*(logs / r).rglob(f"*{COST_SUFFIX}"), logs / f"{r}{COST_SUFFIX}"]]
    for path in sorted(p for p in paths if p.exists()):
        parts = path.relative_to(logs).parts
        rule = parts[0][: -len(COST_SUFFIX)] if len(parts) == 1 else parts[0]
        # logs/<rule>/<dataset>.cost.json, or logs/<rule>/<dataset>/.../<key>.cost.json
        key = parts[1][: -len(COST_SUFFIX)] if len(parts) == 2 else (parts[1] if len(parts) > 2 else None)
        dataset = key if key in datasets else None
        c = read_json(path)
        out.append(
            JobCost(
                rule,
                dataset,
                c["startup_s"],
                c["wall_s"],
                c["cpu_s"],
                c["peak_rss_mb"],
                c["gpu_peak_mb"],
                sum(c["model_load_s"].values()),
                c.get("startup_cpu_s", 0.0),
            )
        )
    return out


@dataclass(frozen=True)
class Scale:
    """A dataset in full, in the sample and in the small sample: records and audio seconds, and a
    long_form dataset's seconds of recordings (its records and audio then estimated from what its
    sampled recordings gave: sharflow.plan.build.segmented_summary)."""

    records: int
    seconds: float
    sample_records: int
    sample_seconds: float
    small_records: int = 0
    small_seconds: float = 0.0
    recording_seconds: float = 0.0
    sample_recording_seconds: float = 0.0
    small_recording_seconds: float = 0.0
    long_form: bool = False

    def units(self, driver: str, which: str) -> float:
        """The driver's units (audio seconds, records or seconds of recordings) of the full corpus,
        the sample or the small sample (`which`: full, sample, small); 1 for a rule driven by none."""
        if driver == "audio":
            return {"full": self.seconds, "sample": self.sample_seconds, "small": self.small_seconds}[which]
        if driver == "records":
            counts = {"full": self.records, "sample": self.sample_records, "small": self.small_records}
            return float(counts[which])
        if driver == "recordings":
            return {
                "full": self.recording_seconds,
                "sample": self.sample_recording_seconds,
                "small": self.small_recording_seconds,
            }[which]
        return 1.0

    def ratio(self, driver: str) -> float:
        sample = self.units(driver, "sample")
        return self.units(driver, "full") / sample if sample else 0.0


def total_scale(scales: dict[str, Scale]) -> Scale:
    """Every dataset together (the rules that run once over all of them)."""
    fields = [f for f in Scale.__dataclass_fields__ if f != "long_form"]
    return Scale(**{f: sum(getattr(s, f) for s in scales.values()) for f in fields})


@dataclass(frozen=True)
class Fit:
    """A job's cost as fixed (per job) + per_unit x its units."""

    fixed: float
    per_unit: float


Point = tuple[int, float, float]  # a run's (jobs, units, cost) of one rule and dataset


# What a job's measured seconds vary by between two runs of the same work on a shared machine: the
# calibration's jobs that do no per-record work differed by up to 0.08 s between its two runs, the
# report job (figures) by 5 % (docs: cost). Growth within this is noise: scaled by the corpus it
# would be multiplied into seconds that are not there.
NOISE_S = 0.2
NOISE_FRACTION = 0.10


def grew(big: Point, small: Point) -> bool:
    """Whether a rule's cost per job grew from the small run to the sample by more than noise."""
    (jobs1, _, cost1), (jobs2, _, cost2) = big, small
    return cost1 / jobs1 - cost2 / jobs2 > max(NOISE_S, NOISE_FRACTION * cost2 / jobs2)


def fit_line(big: Point, small: Point | None, fallback_fixed: float) -> Fit:
    """The fixed and per-unit cost from the calibration's two runs, each (jobs, units, cost): the
    line through both where their units differ, kept non-negative, and all of it fixed where the
    cost grew by no more than noise (grew); from one run alone, its start-up and model loads
    (`fallback_fixed`, per job) as the fixed part and the rest per unit."""
    jobs1, units1, cost1 = big
    if small is not None and small[1] != units1 and small[0] == jobs1:
        if not grew(big, small) or small[1] > units1:  # no growth measurable (noise): all of it fixed
            return Fit(cost1 / jobs1, 0.0)
        _, units2, cost2 = small
        per_unit = (cost1 - cost2) / (units1 - units2)
        fixed = (cost1 - per_unit * units1) / jobs1
        if fixed < 0:  # no fixed part measurable: all of it per unit
            return Fit(0.0, cost1 / units1 if units1 else 0.0)
        return Fit(fixed, per_unit)
    fixed = min(fallback_fixed, cost1 / jobs1)
    return Fit(fixed, (cost1 - jobs1 * fixed) / units1 if units1 else 0.0)


@dataclass
class RulePlan:
    """One rule's prediction for the full run."""

    rule: str
    driver: str
    jobs: int
    cpu_s: float = 0.0
    fixed_cpu_s: float = 0.0
    wall_s: float = 0.0  # summed over jobs
    job_wall_s: float = 0.0  # the longest predicted job
    peak_rss_mb: float = 0.0
    gpu_peak_mb: float = 0.0
    calibration_cpu_s: float = 0.0
    per_shard_wall_s: float = 0.0  # shard rules: one shard's variable wall time in the full run
    fixed_wall_s: float = 0.0  # one job's fixed wall time (start-up and model loads)
    grew: bool = False  # whether its CPU per unit was measured above noise (fit_line) for a dataset
    gpu: bool = False  # whether its jobs hold a GPU on a cluster (is_gpu_rule with the run's config)

    def add_as_ran(self, jobs: list[JobCost]) -> None:
        """Add jobs planned as they ran (actual, one_off): all of their cost fixed."""
        self.jobs += len(jobs)
        self.cpu_s += sum(j.cpu_s for j in jobs)
        self.fixed_cpu_s += sum(j.cpu_s for j in jobs)
        self.wall_s += sum(j.job_wall_s for j in jobs)
        self.job_wall_s = max(self.job_wall_s, *(j.job_wall_s for j in jobs))
        self.fixed_wall_s = max(self.fixed_wall_s, self.job_wall_s)


def full_jobs(rule: str, sample_jobs: int, dataset: str | None, config: dict, shards: dict[str, int]) -> int:
    """How many jobs a rule has in the full run for one dataset (None: the rules over all of them):
    a part rule's configured parts, the shard jobs' blocks of shards_per_job over the dataset's Shar
    sets (their block, tail and single-shard jobs as one), the calibration's count for the others."""
    if rule in PART_RULES:
        section, key = PART_RULES[rule]
        return config[section][key]
    match = SHARD_RULE.match(rule) or re.match(r"^(shar|codes)_jobs$", rule)
    if match:
        per_job = config[match.group(1)]["shards_per_job"]
        sets = {k: n for k, n in shards.items() if dataset is None or k.split("/")[0] == dataset}
        codecs = max(1, len(config.get("codecs", {}))) if match.group(1) == "codes" else 1
        return codecs * sum(math.ceil(n / per_job) for n in sets.values())
    return sample_jobs


# Bytes of peak RSS each record adds to a job that sees a whole dataset: the peak at 10^6 records less
# the peak at 300, per record added, rounded up to 10 (benchmarks/bench_scale.py, Emilia-shaped,
# 2026-11-28; docs: performance). 0: flat from 300 to 10^6 records. A rule not here is bounded by
# design (its part, shard or batch) or not measured yet: its calibration peak.
RSS_PER_RECORD = {
    "shar_plan": 220,  # four 8-byte columns a record (id, content key, offset, seconds) and the plan
    "catalog": 150,
    "buckets": 110,
    "context_plan": 20,
    "splits": 10,  # the speakers it has seen (per split)
    "input_cfg": 100,  # over every dataset: each train record's duration, for the bucket bins
    "dataset_card": 150,  # four catalog columns and the speakers' table
    "calibration_sample": 8,  # the records' speakers and durations it draws whole speakers from
    "text_merge": 0,
    "validation_ds": 6,  # measured at 10^7: 5 bytes a record (bench_scale)
    "context_merge": 0,
    "shar_merge": 0,
    "quality_merge": 0,
    "quality_filter": 0,
    "codes_merge": 0,
    # over every dataset: the held-out fingerprints (~1,000 hashes a held-out record at 3 % held out:
    # a pair and a triplet, 16 bytes, and their joining and sort) and 8 bytes a train record; a check
    # part holds the index too, with its bucket bounds and the held-out records' entries
    "identity_index": 1330,
    "identity_check": 850,
    "identity_merge": 20,
    # measured, not one structure's: verify reads the catalog along the shards (its reader's buffers);
    # the report holds the catalog's durations and lengths (bucket occupancy) and the speakers' table
    "verify": 90,
    "report": 170,
}
# Rules whose memory grows with the whole corpus, not with the share of it their job sees: every
# identity check part holds the whole held-out index
WHOLE_CORPUS_MEMORY = {"identity_check"}


def predicted_peak_mb(rule: str, sample_peak_mb: float, sample_records: float, full_records: float) -> float:
    """A job's peak RSS in the full run: its calibration peak (on `sample_records` records a job) plus
    the rule's per-record part (RSS_PER_RECORD) for each record more a job sees in the full run."""
    added = max(0.0, full_records - sample_records)
    return sample_peak_mb + RSS_PER_RECORD.get(rule, 0) * added / 2**20


def _group(jobs: list[JobCost]) -> dict[str | None, list[JobCost]]:
    out: dict[str | None, list[JobCost]] = defaultdict(list)
    for j in jobs:
        out[j.dataset].append(j)
    return out


def plan_rules(
    sample: list[JobCost],
    small: list[JobCost],
    actual: list[JobCost],
    scales: dict[str, Scale],
    config: dict,
    shards: dict[str, int],
) -> dict[str, RulePlan]:
    """Each rule's RulePlan from the calibration's two runs (on the sample and on the small sample),
    prepare's own jobs as they ran. The shar and codes jobs of every kind are planned together, as
    `shar_jobs` and `codes_jobs`. `shards`: the full run's predicted shard count per Shar set."""

    def key(rule: str) -> str:
        match = SHARD_RULE.match(rule)
        return f"{match.group(1)}_jobs" if match else rule

    def driver(job: JobCost) -> str:
        return dataset_driver(job.rule, job.dataset, scales)

    by_rule: dict[str, list[JobCost]] = defaultdict(list)
    small_by_rule: dict[str, list[JobCost]] = defaultdict(list)
    for job in sample:
        if driver(job) != "actual":
            by_rule[key(job.rule)].append(job)
    for job in small:
        small_by_rule[key(job.rule)].append(job)
    for job in actual:
        if driver(job) == "actual":
            by_rule[job.rule].append(job)
    total = total_scale(scales)
    return {
        rule: _plan_one(rule, jobs, small_by_rule.get(rule, []), scales, total, config, shards)
        for rule, jobs in sorted(by_rule.items())
    }


def fit_group(group: list[JobCost], twin: list[JobCost] | None, scale: Scale, driver: str) -> tuple[Fit, Fit]:
    """(CPU, wall) fits of one rule's jobs of one dataset: the sample run's `group` and the small
    run's `twin` (None where it had none: start-up and model loads are then the fixed part)."""
    points = []
    for attr, fixed in (("cpu_s", lambda j: j.startup_cpu_s + j.load_s), ("job_wall_s", lambda j: j.fixed_s)):
        big = (len(group), scale.units(driver, "sample"), sum(getattr(j, attr) for j in group))
        small = (
            (len(twin), scale.units(driver, "small"), sum(getattr(j, attr) for j in twin)) if twin else None
        )
        points.append(fit_line(big, small, sum(fixed(j) for j in group) / len(group)))
    return points[0], points[1]


def _plan_one(rule, jobs, small_jobs, scales, total, config, shards) -> RulePlan:
    """One rule's RulePlan: per dataset, its jobs as they ran (actual, one_off) or scaled by its
    driver (a long_form dataset's prepare and segment jobs by what its sampled recordings gave)."""

    def driver(dataset: str | None) -> str:
        return "audio" if rule.endswith("_jobs") else dataset_driver(rule, dataset, scales)

    groups = sorted(_group(jobs).items(), key=lambda kv: kv[0] or "")
    drivers = [driver(dataset) for dataset, _ in groups]
    plan = RulePlan(
        rule,
        # a rule scaled for one dataset and run in full for another (prepare) is named by its scaling
        next((d for d in drivers if d not in ("actual", "one_off")), drivers[0]),
        0,
        peak_rss_mb=max(j.peak_rss_mb for j in jobs),
        gpu_peak_mb=max(j.gpu_peak_mb for j in jobs),
        calibration_cpu_s=sum(j.cpu_s for j in jobs),
        gpu=is_gpu_rule(rule, config),
    )
    small_groups = _group(small_jobs)
    variable_wall = 0.0
    for (dataset, group), how in zip(groups, drivers, strict=True):
        if how in ("actual", "one_off"):
            plan.add_as_ran(group)
            continue
        n = full_jobs(rule, len(group), dataset, config, shards)
        cpu, wall = fit_group(group, small_groups.get(dataset), scales.get(dataset) or total, how)
        full_units = (scales.get(dataset) or total).units(how, "full")
        plan.grew = plan.grew or cpu.per_unit > 0
        plan.jobs += n
        plan.cpu_s += n * cpu.fixed + cpu.per_unit * full_units
        plan.fixed_cpu_s += n * cpu.fixed
        plan.wall_s += n * wall.fixed + wall.per_unit * full_units
        variable_wall += wall.per_unit * full_units
        plan.fixed_wall_s = max(plan.fixed_wall_s, wall.fixed)
        plan.job_wall_s = max(plan.job_wall_s, wall.fixed + wall.per_unit * full_units / max(1, n))
        scale = scales.get(dataset) or total
        plan.peak_rss_mb = max(
            plan.peak_rss_mb,
            predicted_peak_mb(
                rule,
                max(j.peak_rss_mb for j in group),
                scale.units("records", "sample") / len(group),
                scale.units("records", "full") / (1 if rule in WHOLE_CORPUS_MEMORY else max(1, n)),
            ),
        )
    if rule.endswith("_jobs"):  # one shard's wall time; a job of each kind: fixed + its shards
        n_shards = sum(shards.values()) * (
            max(1, len(config.get("codecs", {}))) if rule.startswith("codes") else 1
        )
        plan.per_shard_wall_s = variable_wall / max(1, n_shards)
        per_job = config[rule.split("_")[0]]["shards_per_job"]
        plan.job_wall_s = plan.fixed_wall_s + plan.per_shard_wall_s * per_job
    return plan


def resources_table(plans: dict[str, RulePlan], config: dict, safety: float) -> dict[str, dict[str, int]]:
    """{rule: {mem_mb, runtime}} for every planned rule (the shard jobs: each kind of job the config
    makes, sharflow.work.jobs.job_kinds, sized for the shards it makes)."""
    out = {}
    for name, p in sorted(plans.items()):
        if name.endswith("_jobs"):
            stage = name[: -len("_jobs")]
            for kind in job_kinds(stage, config[stage]["shards_per_job"]):
                seconds = p.fixed_wall_s + p.per_shard_wall_s * kind.count
                out[kind.name] = planned_figures(p.peak_rss_mb, seconds, safety)
        else:
            out[name] = planned_figures(p.peak_rss_mb, p.job_wall_s, safety)
            if name == "quality_part":  # the same job without a GPU (quality.device: cpu)
                out.setdefault("quality_part_cpu", out[name])
    return out


AUDIO_DIRS = ("target_audio", "context_audio")


def disk_of(results: str | Path, scales: dict[str, Scale], datasets) -> dict[str, dict[str, float]]:
    """Bytes the calibration wrote under results/, by kind (shar audio, shar cuts, codes, other
    results), and scaled to the full corpus (audio and codes by audio seconds, the rest by records,
    per dataset). Models and caches are one-offs: counted, not scaled."""
    total = total_scale(scales)
    out: dict[str, dict[str, float]] = {}
    results = Path(results)
    for root, _dirs, files in os.walk(results):
        rel = Path(root).relative_to(results).parts
        dataset = rel[0] if rel and rel[0] in datasets else None
        if dataset is None and rel and rel[0] in ("models", "plan"):
            kind, driver = "models (one-off)", "one_off"
        elif any(p.startswith("codes_") for p in rel):
            kind, driver = "codes", "audio"
        elif any(p in AUDIO_DIRS for p in rel):
            kind, driver = "shar audio", "audio"
        elif "cuts" in rel:
            kind, driver = "shar cuts", "records"
        else:
            kind, driver = "other results", "records"
        size = sum(os.path.getsize(os.path.join(root, f)) for f in files)
        ratio = (scales.get(dataset) or total).ratio(driver)
        row = out.setdefault(kind, {"calibration_bytes": 0.0, "bytes": 0.0})
        row["calibration_bytes"] += size
        row["bytes"] += size * ratio
    return out
