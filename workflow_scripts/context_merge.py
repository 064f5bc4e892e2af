"""Snakemake adapter: sharflow.context.merge.merge_context."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.context.merge import merge_context
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    merge_context(
        part_records=snakemake.input.records,
        part_rejected=snakemake.input.rejected,
        part_stats=snakemake.input.stats,
        records_stats=snakemake.input.records_stats,
        with_context=snakemake.output.with_context,
        rejected_dir=snakemake.output.rejected,
        stats=snakemake.output.stats,
        dataset=snakemake.wildcards.dataset,
    )
