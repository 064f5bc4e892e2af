"""Snakemake adapter: sharflow.quality.part.merge_quality."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.quality.merge import merge_quality

with job_log(snakemake.log[0]):
    merge_quality(
        part_metrics=list(snakemake.input.metrics),
        part_stats=list(snakemake.input.stats),
        records_stats=snakemake.input.records_stats,
        metrics=snakemake.output.metrics,
        stats=snakemake.output.stats,
        part_embeddings=list(snakemake.input.embeddings),
        embeddings=snakemake.output.embeddings,
    )
