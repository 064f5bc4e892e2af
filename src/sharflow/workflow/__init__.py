"""The workflow's Python, as plain functions over a config and the layout: every rule's input, params
and resource functions, the run's constants, the shard jobs' listing and the repair of damaged ones.

rules/common.smk makes one `Workflow` with a `SnakemakeEngine` and wires its functions to the rules;
the tests make one with a `PlainEngine` and call the same functions without Snakemake. Modules: run
(the constants), inputs (prepare, text, parts), measures (quality, identity, splits, context), shards
(the shar and codes jobs), handoff (catalog, training, card, report, publish), look (resources, the
dry run's summary), engine (the seam to Snakemake).
"""

from sharflow.core.exports import lazy_exports

__all__ = [
    "PlainEngine",
    "SnakemakeEngine",
    "Workflow",
    "force_rerun",
    "mend_group_components",
    "warm_starts",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "PlainEngine": "engine",
        "SnakemakeEngine": "engine",
        "force_rerun": "engine",
        "mend_group_components": "engine",
        "warm_starts": "engine",
        "Workflow": "workflow",
    },
)
