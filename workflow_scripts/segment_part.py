"""Snakemake adapter: sharflow.segment.dataset.run_planned_part."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.segment.dataset import run_planned_part, settings_of

# The guard keeps spawned rank processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        params = snakemake.params
        run_planned_part(
            snakemake.input.plan,
            int(snakemake.wildcards.part),
            audio_root=params.audio_root,
            work_root=params.work,
            settings=settings_of(params.settings["block"], params.settings["asr"]),
            out_stats=snakemake.output.stats,
            device=params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
            fit_ranks=params.fit_ranks,
        )
