"""Snakemake adapter: sharflow.shar.merge.merge_shar_stats."""

from sharflow.core.logs import job_log
from sharflow.shar.merge import merge_shar_stats

with job_log(snakemake.log[0]):
    merge_shar_stats(
        snakemake.input.stats,
        context_stats=snakemake.input.context_stats,
        stats=snakemake.output.stats,
        rejected_dir=snakemake.output.rejected,
        dataset=snakemake.wildcards.dataset,
    )
