"""Snakemake adapter: sharflow.quality.filter.filter_quality."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.quality.filter import filter_quality

with job_log(snakemake.log[0]):
    filter_quality(
        records=snakemake.input.records,
        metrics=snakemake.input.metrics,
        records_stats=snakemake.input.records_stats,
        kept=snakemake.output.kept,
        rejected_dir=snakemake.output.rejected,
        stats=snakemake.output.stats,
        filters=dict(snakemake.params.filters),
        action=snakemake.params.action,
        dataset=snakemake.wildcards.dataset,
    )
