"""Snakemake adapter: sharflow.segment.dataset.merge_planned."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.segment.dataset import merge_planned, settings_of

with job_log(snakemake.log[0]):
    settings = settings_of(snakemake.params.settings["block"], snakemake.params.settings["asr"])
    merge_planned(
        snakemake.input.plan,
        list(snakemake.input.parts),
        dataset=snakemake.wildcards.dataset,
        manifest=snakemake.output.manifest,
        stats=snakemake.output.stats,
        source=settings.source,
        link_similarity=snakemake.params.link_similarity,
    )
