"""Snakemake adapter: sharflow.context.merge_context."""

from sharflow.context import merge_context
from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    merge_context(
        snakemake.input.records,
        snakemake.input.rejected,
        snakemake.input.stats,
        snakemake.input.prepare_stats,
        snakemake.output.with_context,
        snakemake.output.rejected,
        snakemake.output.stats,
        dataset=snakemake.wildcards.dataset,
    )
