"""Stage 4, codes: codec codes of every cut's target and context audio, per codec.

A codes job (a block of shards, the model loaded once per rank) reads each shard's audio tars, plans
length-sorted batches of one frame count (so codes do not depend on the batch, the rank or the
block), encodes them on its ranks and writes target_codes and context_codes beside each shard,
atomically, as soon as each is encoded; a killed job's rerun makes only the shards it had not written.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["encode_shards", "merge_codes_stats", "run_codes_job", "write_codec_spec"]
__getattr__ = lazy_exports(
    __name__,
    {
        "encode_shards": "shard",
        "run_codes_job": "shard",
        "merge_codes_stats": "merge",
        "write_codec_spec": "spec",
    },
)
