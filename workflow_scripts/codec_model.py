"""Snakemake adapter: sharflow.codes.write_codec_spec."""

from sharflow.codes import write_codec_spec
from sharflow.logs import job_log

with job_log(snakemake.log[0]):
    write_codec_spec(snakemake.params.codec, snakemake.output.spec)
