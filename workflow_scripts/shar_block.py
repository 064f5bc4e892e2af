"""Snakemake adapter of the shar jobs (shar_block, shar_block<size>, shar_tail<n>, shar_shard):
sharflow.shar.shard.write_shards over the job's shards, then the job's completion record."""

from sharflow.core.logs import job_log

# Spawned worker processes re-run this file as __mp_main__: the guard keeps them out of the body,
# and importing sharflow.shar.shard (numpy, pyarrow) inside it keeps their start-up light.
if __name__ == "__main__":
    from sharflow.core.layout import block_members, write_job_record
    from sharflow.shar.audio import EncodeSettings
    from sharflow.shar.shard import write_shards

    members = block_members(snakemake.wildcards.block, count=snakemake.params.shards)
    with job_log(snakemake.log[0]):
        write_shards(
            members,
            snakemake.output,
            with_context=snakemake.input.with_context,
            index=snakemake.input.index,
            plan=snakemake.input.plan,
            settings=EncodeSettings(**snakemake.params.settings),
            workers=snakemake.threads,
        )
        write_job_record(snakemake.output.job, members)
