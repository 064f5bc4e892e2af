"""Snakemake adapter: sharflow.shar.shard.write_shard."""

from sharflow.core.logs import job_log

# Spawned worker processes re-run this file as __mp_main__: the guard keeps them out of the body,
# and importing sharflow.shar.shard (numpy, pyarrow) inside it keeps their start-up light.
if __name__ == "__main__":
    from sharflow.core.layout import ShardFiles
    from sharflow.shar.audio import EncodeSettings
    from sharflow.shar.shard import write_shard

    with job_log(snakemake.log[0]):
        write_shard(
            int(snakemake.wildcards.shard),
            with_context=snakemake.input.with_context,
            index=snakemake.input.index,
            plan=snakemake.input.plan,
            out=ShardFiles.of(snakemake.output),
            settings=EncodeSettings(**snakemake.params.settings),
            workers=snakemake.threads,
        )
