"""The context stage's plan: group the prepared records and bin-pack the groups onto parts.

Records are grouped by speaker (sharflow.context.grouping); each group costs n² for similarity plus
α·seconds for embedding, and the groups are bin-packed onto `parts` with LPT. plan.json lists
every group with its part, size and cost. Imports neither torch nor the audio stack.
"""

import json
import logging
from collections import Counter, defaultdict

from sharflow.context.grouping import group_key_function
from sharflow.core.atomic import write_json
from sharflow.core.jsonl import numbered_lines
from sharflow.work.balance import imbalance, loads, lpt_assign

log = logging.getLogger(__name__)


def group_cost(n: int, seconds: float, cost_per_audio_second: float) -> float:
    return float(n * n + cost_per_audio_second * seconds)


def plan_context(
    prepared: str, *, plan: str, parts: int, grouping: dict, cost_per_audio_second: float
) -> dict:
    """Group the prepared records and bin-pack the groups onto `parts`; write and return the plan."""
    key_of = group_key_function(**grouping)
    sizes: Counter[str] = Counter()
    seconds: defaultdict[str, float] = defaultdict(float)
    for _, _, raw in numbered_lines(prepared):
        record = json.loads(raw)
        key = key_of(record)
        sizes[key] += 1
        seconds[key] += record["duration"]
    costs = {k: group_cost(sizes[k], seconds[k], cost_per_audio_second) for k in sizes}
    assignment = lpt_assign(costs, parts)
    part_costs = loads(assignment, costs)
    planned = {
        "parts": parts,
        "grouping": grouping,
        "cost_per_audio_second": cost_per_audio_second,
        "records": sum(sizes.values()),
        "part_costs": part_costs,
        "imbalance": imbalance(part_costs) if costs else 1.0,
        "groups": {
            k: {"part": p, "n": sizes[k], "seconds": round(seconds[k], 3), "cost": costs[k]}
            for p, keys in enumerate(assignment)
            for k in keys
        },
    }
    write_json(plan, planned, sort_keys=True)
    log.info(
        "context plan: %d records in %d groups onto %d parts, max/mean part cost %.3f",
        planned["records"],
        len(costs),
        parts,
        planned["imbalance"],
    )
    return planned
