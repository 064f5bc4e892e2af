"""Snakemake adapter: sharflow.shar.merge_shar_stats."""

from sharflow.logs import job_log
from sharflow.shar import merge_shar_stats

with job_log(snakemake.log[0]):
    merge_shar_stats(
        snakemake.input.stats,
        snakemake.input.context_stats,
        snakemake.output.stats,
        snakemake.output.rejected,
        dataset=snakemake.wildcards.dataset,
    )
