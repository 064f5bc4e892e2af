"""Verify: open every shard of every Shar field and prove the dataset is whole and aligned.

Writes verify.json only when every check passes; every problem names dataset, field, shard, cut and file.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["verify_dataset"]
__getattr__ = lazy_exports(__name__, {"verify_dataset": "dataset"})
