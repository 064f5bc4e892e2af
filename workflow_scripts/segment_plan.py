"""Snakemake adapter: sharflow.segment.dataset.list_recordings and plan_segments."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.logs import job_log
from sharflow.segment.dataset import list_recordings, plan_segments

with job_log(snakemake.log[0]):
    listing = snakemake.params.listing
    recordings = list_recordings(listing["audio_root"], listing["listing"], listing["language"])
    plan_segments(recordings, listing["audio_root"], snakemake.params.parts, snakemake.output.plan)
