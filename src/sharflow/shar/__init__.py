"""Stage 3, shar: NeMo-compatible Lhotse Shar shards, one atomic job per shard.

shar_plan (a checkpoint) shuffles the records into shards; each shar_shard job writes one shard's
cuts, target_audio and context_audio (in lhotse's bytes, without importing lhotse), copying whole
files through where nothing needs decoding; shar_merge sums the shards' stats.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["merge_shar_stats", "plan_shards", "write_shard"]
__getattr__ = lazy_exports(
    __name__, {"plan_shards": "plan", "write_shard": "shard", "merge_shar_stats": "merge"}
)
