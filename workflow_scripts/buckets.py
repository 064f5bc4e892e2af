"""Snakemake adapter: sharflow.buckets.write_buckets."""

from sharflow.buckets import write_buckets
from sharflow.layout import cut_files, shar_dir_of_plan
from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    write_buckets(
        cut_files(shar_dir_of_plan(snakemake.input.plan), snakemake.input.plan),
        snakemake.output.buckets,
        num_buckets=snakemake.params.num_buckets,
        sub_buckets=snakemake.params.sub_buckets,
        z_threshold=snakemake.params.z_threshold,
    )
