"""Snakemake adapter: sharflow.verify.dataset.verify_dataset."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

if __name__ == "__main__":  # verify.workers > 1 spawns processes that re-import this file
    from sharflow.core.layout import shar_dir_of_plan
    from sharflow.core.logs import job_log
    from sharflow.verify.dataset import verify_dataset

    with job_log(snakemake.log[0]):
        verify_dataset(
            snakemake.wildcards.dataset,
            shar_dir=shar_dir_of_plan(snakemake.input.plan),
            plan=snakemake.input.plan,
            shar_stats=snakemake.input.shar_stats,
            codes_stats=snakemake.params.codes_stats,
            catalog=snakemake.input.catalog,
            out=snakemake.output.verify,
            workers=snakemake.threads,
            split=snakemake.params.split,
        )
