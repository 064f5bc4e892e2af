"""Snakemake adapter: sharflow.publish.publish over the run's Shar sets and hand-off files."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.publish import PublishSettings, publish, published_files

with job_log(snakemake.log[0]):
    files = published_files(
        snakemake.params.datasets,
        snakemake.params.held_out,
        snakemake.params.codecs,
        snakemake.input.handoff,
    )
    publish(PublishSettings(**snakemake.params.settings), files, snakemake.output.published)
