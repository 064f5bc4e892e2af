"""Stage 1b, splits (when configured): train, dev and test, with held-out speakers and utterances.

core.splits decides each record's split from its own speaker id or span and the seed (a keyed
hash: stable as data grows); the splits job (splits.stage) writes the records with a `split` field
for the context stage, which never gives a train or seen-split record held-out audio as context.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["assign_splits"]
__getattr__ = lazy_exports(__name__, {"assign_splits": "stage"})
