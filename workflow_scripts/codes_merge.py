"""Snakemake adapter: sharflow.codes.merge.merge_codes_stats over the planned shards' stats."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.codes.merge import merge_codes_stats
from sharflow.core.layout import dataset_files
from sharflow.core.logs import job_log

with job_log(snakemake.log[0]):
    shards = dataset_files(snakemake.wildcards.dataset).planned(snakemake.wildcards.codec)
    merge_codes_stats([shard.stats for shard in shards], snakemake.output.stats)
