"""Snakemake adapter of the shar jobs (shar_block, shar_block<size>, shar_tail<n>, shar_shard):
sharflow.shar.shard.run_shar_job (the job's shards, resuming a killed run, then its record)."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log

# Spawned worker processes re-run this file as __mp_main__: the guard keeps them out of the body,
# and importing sharflow.shar.shard (numpy, pyarrow) inside it keeps their start-up light.
if __name__ == "__main__":
    from sharflow.core.blocks import block_members
    from sharflow.shar.shard import run_shar_job

    with job_log(snakemake.log[0]):
        run_shar_job(
            block_members(snakemake.wildcards.block, count=snakemake.params.shards),
            snakemake.output,
            inputs=snakemake.input.inputs,
            settings=snakemake.params.settings,
            workers=snakemake.threads,
        )
