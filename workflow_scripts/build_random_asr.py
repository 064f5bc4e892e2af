"""Snakemake adapter: sharflow.models.asr.build_random_asr, through sharflow's cache."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    from sharflow.models.asr import build_random_asr
    from sharflow.models.random_init import cached_random_model

    cached_random_model(
        build_random_asr, snakemake.input.config, snakemake.output.model, snakemake.params.cache_dir
    )
