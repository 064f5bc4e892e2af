"""Snakemake adapter: sharflow.codes.merge_codes_stats."""

from sharflow.codes import merge_codes_stats
from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    merge_codes_stats(snakemake.input.stats, snakemake.output.stats)
