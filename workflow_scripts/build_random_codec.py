"""Snakemake adapter: sharflow.codecs.nemo.build_random_codec."""

from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    from sharflow.codecs.nemo import build_random_codec

    build_random_codec(snakemake.input.config, snakemake.output.model)
