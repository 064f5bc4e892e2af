"""Snakemake adapter of a lhotse recipe dataset's first job: sharflow.prepare.recipe.run_recipe."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.prepare.recipe import run_recipe

if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        run_recipe(
            recordings=snakemake.output.recordings,
            supervisions=snakemake.output.supervisions,
            stats=snakemake.output.stats,
            workers=snakemake.threads,
            **snakemake.params.settings,
        )
