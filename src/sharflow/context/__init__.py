"""Stage 2, context: give every record the most similar other utterance of its speaker group.

context_plan bin-packs speaker groups onto parts; each context_part job embeds its groups on its
ranks and picks contexts from blockwise top-k similarities (never an n×n matrix); context_merge
joins the parts into with_context.jsonl.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["merge_context", "plan_context", "run_context_part"]
__getattr__ = lazy_exports(
    __name__, {"plan_context": "plan", "run_context_part": "part", "merge_context": "merge"}
)
