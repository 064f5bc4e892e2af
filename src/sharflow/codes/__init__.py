"""Stage 4, codes: codec codes of every cut's target and context audio, per codec.

A codes job reads a shard's audio tars, plans length-sorted batches of one frame count (so codes do
not depend on the batch or the rank), encodes them on its ranks and writes target_codes and
context_codes beside the shard, atomically.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["encode_shard", "merge_codes_stats", "write_codec_spec"]
__getattr__ = lazy_exports(
    __name__, {"encode_shard": "shard", "merge_codes_stats": "merge", "write_codec_spec": "spec"}
)
