"""The critical path: the jobs a run goes through one after another, and the wall time they add up to.

Most of a run's work is in jobs that run side by side (the text, quality, identity and context
parts, the identity checks, the shar and codes jobs): more nodes make those shorter. What more
nodes cannot shorten is the spine of the DAG, the jobs that each wait for the one before and see a
whole dataset (or every dataset): a long_form dataset's segment plan and merge, prepare, the merges,
the plans, the identity index, splits, the catalog, verify, the report. Their predicted job wall
times (the plan's, for the user's corpus) summed along the spine bound the run's wall time from
below, whatever the cluster. At each step, jobs that run side by side on the spine (the codes merge
and the shar merge; verify, the buckets and the card after the catalog) count as the longest of them.
"""

from sharflow.plan.model import RulePlan

# The spine, in order: each step the rules that run side by side there (docs: cost).
SPINE: tuple[tuple[str, ...], ...] = (
    ("segment_plan",),
    ("segment_merge",),
    ("prepare", "recipe"),
    ("text_merge",),
    ("quality_merge",),
    ("quality_filter",),
    ("identity_index",),
    ("identity_merge",),
    ("splits",),
    ("context_plan",),
    ("context_merge",),
    ("shar_plan",),
    ("codes_merge", "shar_merge"),
    ("catalog",),
    ("verify", "buckets", "dataset_card", "input_cfg", "validation_ds"),
    ("evaluation_set", "report"),
)


def critical_path(rules: dict[str, RulePlan]) -> dict:
    """{steps: [[rule, its longest job's wall seconds], ...] (a step's longest rule, in order),
    wall_s: their sum, longest: the longest step's rule} over the rules the plan has."""
    steps = []
    for step in SPINE:
        planned = [(rules[r].job_wall_s, r) for r in step if r in rules]
        if planned:
            wall, rule = max(planned)
            steps.append([rule, round(wall, 1)])
    longest = max(steps, key=lambda s: s[1])[0] if steps else None
    return {"steps": steps, "wall_s": round(sum(s[1] for s in steps), 1), "longest": longest}
