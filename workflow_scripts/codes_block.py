"""Snakemake adapter of the codes jobs (codes_block, codes_block<size>, codes_tail<n>, codes_shard):
sharflow.codes.shard.run_codes_job (the job's shards, resuming a killed run, then its record)."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log

# Spawned rank processes re-run this file as __mp_main__: the guard keeps them out of the body.
if __name__ == "__main__":
    from sharflow.codes.shard import run_codes_job
    from sharflow.core.blocks import block_members
    from sharflow.core.layout import dataset_files

    with job_log(snakemake.log[0]):
        run_codes_job(
            block_members(snakemake.wildcards.block, count=snakemake.params.shards),
            dataset_files(snakemake.wildcards.dataset).shard,
            snakemake.output,
            codec=snakemake.input.codec,
            shar_jobs=snakemake.input.shar_jobs,
            batch_seconds=snakemake.params.batch_seconds,
            device=snakemake.params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
        )
