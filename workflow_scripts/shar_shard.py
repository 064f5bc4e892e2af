"""Snakemake adapter: sharflow.shar.write_shard."""

from sharflow.logs import job_log
from sharflow.shar import EncodeSettings, write_shard

# The guard keeps spawned worker processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        write_shard(
            snakemake.input.with_context,
            snakemake.input.index,
            snakemake.input.plan,
            int(snakemake.wildcards.shard),
            snakemake.output.cuts,
            snakemake.output.target,
            snakemake.output.context,
            snakemake.output.stats,
            snakemake.output.rejected,
            settings=EncodeSettings(**snakemake.params.settings),
            workers=snakemake.threads,
        )
