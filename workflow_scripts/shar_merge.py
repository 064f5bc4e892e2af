"""Snakemake adapter: sharflow.shar.merge.merge_shar_stats over the planned shards' stats."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import dataset_files
from sharflow.core.logs import job_log
from sharflow.shar.merge import merge_shar_stats

with job_log(snakemake.log[0]):
    merge_shar_stats(
        [shard.stats for shard in dataset_files(snakemake.wildcards.dataset).planned()],
        context_stats=snakemake.input.context_stats,
        plan=snakemake.input.plan,
        stats=snakemake.output.stats,
        rejected_dir=snakemake.output.rejected,
        dataset=snakemake.wildcards.dataset,
    )
