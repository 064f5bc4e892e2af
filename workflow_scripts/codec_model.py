"""Snakemake adapter: sharflow.codes.shard.write_codec_spec."""

from sharflow.codes.spec import write_codec_spec
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    write_codec_spec(snakemake.params.codec, snakemake.output.spec)
