"""Snakemake adapter: sharflow.plan.sample.draw_sample, or draw_recordings for a long_form dataset."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.atomic import write_json
from sharflow.core.logs import job_log
from sharflow.plan.sample import draw_recordings, draw_sample

with job_log(snakemake.log[0]):
    params, out = snakemake.params, snakemake.output
    if hasattr(snakemake.input, "plan"):  # a long_form dataset: some of its recordings
        summary = draw_recordings(snakemake.input.plan, out.sample, out.small, params.hours, params.seed)
    else:
        sample = draw_sample(snakemake.input.prepared, out.sample, params.size, params.seed)
        # a quarter of the sample, its speakers as full as the sample's (at most a quarter of its size each)
        small_size = max(1, sample.sample_records // 4)
        small = draw_sample(out.sample, out.small, small_size, params.seed, cap=max(1, params.size // 4))
        summary = {**sample.as_dict(), **small.as_small()}
    write_json(out.summary, summary)
