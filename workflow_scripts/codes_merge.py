"""Snakemake adapter: sharflow.codes.shard.merge_codes_stats."""

from sharflow.codes.merge import merge_codes_stats
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    merge_codes_stats(snakemake.input.stats, snakemake.output.stats)
