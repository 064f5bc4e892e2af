"""The memory and time each rule's jobs ask a scheduler for: from the cost plan where there is one.

Every rule's `mem_mb` and `runtime` (minutes) resources are `PlannedResources.mem_mb(rule)` and
`PlannedResources.runtime(rule)`: callables of the job's attempt. Without a plan they give
DEFAULTS (the figures the Slurm profile asked for before there were plans) times the attempt;
with the plan's `results/plan/resources.yaml` (sharflow.plan.build writes it) they give its
figure for the rule, times the attempt. The plan's figures already hold its safety factor
(plan.safety): a job that runs out of memory or time is retried (the profile's `retries`) with
twice, then three times as much.

The plan's figures are used only for what the plan was made for: its key (sharflow.plan.key: the
config values that change cost, each dataset's inputs and record count, the code) must be the key
a plan made now would have. A plan made for something else is not used, and the run says once what
changed and that every rule asks for the defaults (`stale`).

A profile's `set-resources` still wins over both: a user who knows better sets a rule's figure there.
"""

import json
import math
from collections.abc import Callable
from pathlib import Path

from sharflow.core.config import load_yaml
from sharflow.core.errors import SharflowError
from sharflow.plan.key import differences, summarize

SAFETY = 1.5  # the plan asks for this much more than it predicts (memory and time): plan.safety
MIN_MEM_MB = 1000  # the least a planned job asks for: the interpreter and sharflow's imports
MIN_RUNTIME = 10  # minutes: the least a planned job asks for (a scheduler's start-up and staging)
FALLBACK = (4000, 120)  # a rule named nowhere below: (mem_mb, runtime)

# (mem_mb, runtime minutes) per rule without a plan: what profiles/slurm asked for before plans (its
# set-resources, else the rule's mem_mb and the profile's default runtime)
_SHAR_BLOCK = (8000, 150)  # a block of 10 shards
_CODES_BLOCK = (32000, 240)
DEFAULTS: dict[str, tuple[int, int]] = {
    "recipe": (4000, 120),
    "segment_plan": (2000, 120),
    "segment_part": (16000, 720),
    "segment_merge": (2000, 120),
    "prepare": (8000, 240),
    "build_random_asr": (8000, 120),
    "text_normalizer": (4000, 120),
    "text_part": (4000, 120),
    "text_merge": (1000, 120),
    "quality_part": (16000, 480),
    "quality_part_cpu": (16000, 480),
    "quality_merge": (1000, 120),
    "quality_filter": (1000, 120),
    "identity_part": (2000, 120),
    "identity_index": (8000, 120),
    "identity_check": (8000, 120),
    "identity_merge": (1000, 120),
    "splits": (4000, 120),
    "context_plan": (4000, 120),
    "context_part": (32000, 480),
    "context_merge": (4000, 120),
    "shar_plan": (8000, 120),
    "shar_block": _SHAR_BLOCK,
    "shar_block10": _SHAR_BLOCK,
    "shar_block100": (8000, 1500),
    **{f"shar_tail{n}": _SHAR_BLOCK for n in range(2, 10)},
    "shar_shard": (8000, 15),
    "shar_merge": (2000, 120),
    "build_random_codec": (8000, 120),
    "codec_model": (500, 120),
    "codes_block": _CODES_BLOCK,
    "codes_block10": _CODES_BLOCK,
    "codes_block100": (32000, 2400),
    **{f"codes_tail{n}": _CODES_BLOCK for n in range(2, 10)},
    "codes_shard": (32000, 30),
    "codes_merge": (1000, 120),
    "catalog": (4000, 120),  # NeMo's tokenizers are imported when training.tokenizer is set
    "dataset_card": (2000, 120),
    "buckets": (2000, 120),
    "input_cfg": (2000, 120),
    "validation_ds": (2000, 120),
    "evaluation_set": (2000, 120),
    "verify": (4000, 120),
    "report": (2000, 120),
    "publish": (2000, 120),
    "calibration_sample": (2000, 120),
    "plan_vs_actual": (2000, 120),
}


def read_planned(path: str | Path) -> dict[str, dict[str, int]]:
    """{rule: {mem_mb, runtime}} of a plan's resources file; {} where there is none. A file that is
    not such a table is an error naming it (make the plan again)."""
    path = Path(path)
    if not path.exists():
        return {}
    table = load_yaml(path) or {}
    ok = isinstance(table, dict) and all(
        isinstance(v, dict) and all(isinstance(v.get(k), int) and v[k] > 0 for k in ("mem_mb", "runtime"))
        for v in table.values()
    )
    if not ok:
        raise SharflowError(
            f"{path}: not a plan's resources ({{rule: {{mem_mb: int, runtime: int}}}}); "
            "delete it or make the plan again (snakemake plan)"
        )
    return table


class PlannedResources:
    """The `mem_mb` and `runtime` of every rule: the plan's (read from `path` once) or DEFAULTS.

    With `plan` (the plan's plan.json) and `key_now` (the key a plan made now would have, called only
    where there is a plan), the figures are used only if the plan's key is that key; else `stale`
    holds what changed, one line each, and every rule gets the defaults."""

    def __init__(
        self, path: str | Path, plan: str | Path | None = None, key_now: Callable[[], dict] | None = None
    ):
        self.path = str(path)
        self.planned = read_planned(path)
        self.stale: list[str] = []
        if self.planned and key_now is not None:
            recorded = _plan_key(plan)
            self.stale = differences(recorded, key_now())
            if self.stale:
                self.planned = {}

    def message(self) -> str | None:
        """What a run says of a plan it does not use (None: no plan, or the plan is used)."""
        if not self.stale:
            return None
        return (
            f"the cost plan ({self.path}) was made for another config, corpus or code, so every rule "
            f"asks for the default mem_mb and runtime (docs: cost). What changed: {summarize(self.stale)}. "
            "Run `snakemake plan` again for figures of this run"
        )

    def figures(self, rule: str) -> tuple[int, int]:
        """(mem_mb, runtime) of one attempt of `rule`'s jobs."""
        if rule in self.planned:
            return self.planned[rule]["mem_mb"], self.planned[rule]["runtime"]
        return DEFAULTS.get(rule, FALLBACK)

    def source(self, rule: str) -> str:
        return "plan" if rule in self.planned else "default"

    def mem_mb(self, rule: str) -> Callable:
        mem = self.figures(rule)[0]
        return lambda wildcards, attempt: mem * attempt

    def runtime(self, rule: str) -> Callable:
        minutes = self.figures(rule)[1]
        return lambda wildcards, attempt: minutes * attempt


def _plan_key(plan: str | Path | None) -> dict | None:
    """The key a plan.json records (None: no file, or a plan made before plans had keys)."""
    try:
        with open(plan, encoding="utf-8") as f:
            return json.load(f).get("key")
    except (TypeError, FileNotFoundError, json.JSONDecodeError):
        return None


def planned_figures(peak_rss_mb: float, job_seconds: float, safety: float = SAFETY) -> dict[str, int]:
    """A rule's {mem_mb, runtime} from its predicted peak memory and job time, times `safety`, at
    least the minimums: rounded up to 100 MB and to whole minutes."""
    mem = max(MIN_MEM_MB, math.ceil(peak_rss_mb * safety / 100) * 100)
    minutes = max(MIN_RUNTIME, math.ceil(job_seconds * safety / 60))
    return {"mem_mb": int(mem), "runtime": int(minutes)}
