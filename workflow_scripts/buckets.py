"""Snakemake adapter: sharflow.dataset.buckets.write_buckets."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.dataset.buckets import write_buckets

with job_log(snakemake.log[0]):
    write_buckets(
        snakemake.input.catalog,
        snakemake.output.buckets,
        num_buckets=snakemake.params.num_buckets,
        sub_buckets=snakemake.params.sub_buckets,
        z_threshold=snakemake.params.z_threshold,
    )
