"""Snakemake adapter: sharflow.codes.shard.write_codec_spec."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.codes.spec import write_codec_spec
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    write_codec_spec(snakemake.params.codec, snakemake.output.spec)
