"""Stage 3, shar: NeMo-compatible Lhotse Shar shards, each written atomically, a block per job.

shar_plan (a checkpoint) shuffles the records into shards; each shar job (run_shar_job, a block of
shards: sharflow.work.jobs) writes its shards' cuts, target_audio and context_audio (in lhotse's
bytes, without importing lhotse), copying whole files through where nothing needs decoding, and
resumes where a killed run of it stopped; shar_merge sums the shards' stats.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["merge_shar_stats", "plan_shards", "run_shar_job", "write_shard"]
__getattr__ = lazy_exports(
    __name__,
    {"plan_shards": "plan", "write_shard": "shard", "run_shar_job": "shard", "merge_shar_stats": "merge"},
)
