"""Snakemake adapter of the prepare stage: sharflow.prepare.job.prepare_dataset."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.prepare.job import prepare_dataset

# The guard keeps spawned worker processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        prepare_dataset(
            prepared=snakemake.output.prepared,
            rejected_dir=snakemake.output.rejected,
            stats=snakemake.output.stats,
            workers=snakemake.threads,
            **snakemake.params.settings,
        )
