"""The run report: records and hours through every stage, plots, tables, what each quality threshold
costs; and tools to look at it (view: screenshots of Snakemake's HTML report; dag: the rule graph).
"""

from sharflow.core.exports import lazy_exports

__all__ = ["write_report"]
__getattr__ = lazy_exports(__name__, {"write_report": "report"})
