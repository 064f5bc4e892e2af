"""Snakemake adapter: sharflow.asr.build_random_asr."""

from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    from sharflow.asr import build_random_asr

    build_random_asr(snakemake.input.config, snakemake.output.model)
