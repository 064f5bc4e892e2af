"""Stage 4, codes: codec codes of every cut's target and context audio, per codec.

A codes job (a block of shards, the model loaded once per rank) reads each shard's audio tars, plans
length-sorted batches of one frame count (so codes do not depend on the batch, the rank or the
block), encodes them on its ranks and writes target_codes and context_codes beside each shard,
atomically.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["encode_shards", "merge_codes_stats", "write_codec_spec"]
__getattr__ = lazy_exports(
    __name__, {"encode_shards": "shard", "merge_codes_stats": "merge", "write_codec_spec": "spec"}
)
