"""Snakemake adapter: sharflow.shar.plan.plan_shards."""

from sharflow.core.logs import job_log
from sharflow.shar.plan import plan_shards

with job_log(snakemake.log[0]):
    plan_shards(
        snakemake.input.with_context,
        plan=snakemake.output.plan,
        index=snakemake.output.index,
        shard_size=snakemake.params.shard_size,
        seed=snakemake.params.seed,
        split=snakemake.params.split,
    )
