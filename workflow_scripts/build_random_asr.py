"""Snakemake adapter: sharflow.models.asr.build_random_asr."""

from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    from sharflow.models.asr import build_random_asr

    build_random_asr(snakemake.input.config, snakemake.output.model)
