"""Snakemake adapter: sharflow.splits.stage.assign_splits."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.atomic import read_json
from sharflow.core.logs import job_log
from sharflow.splits.stage import DatasetSplits, assign_splits

with job_log(snakemake.log[0]):
    assign_splits(
        snakemake.wildcards.dataset,
        DatasetSplits(**snakemake.params.dataset),
        links=snakemake.input.get("links"),
        identity=snakemake.input.get("identity"),
        records_in=read_json(snakemake.input.records_stats)["records_out"],
        out_records=snakemake.output.records,
        rejected_dir=snakemake.output.rejected,
        stats=snakemake.output.stats,
        empty=snakemake.params.empty,
    )
