"""Snakemake adapter of the text stage: sharflow.text.job.normalize_dataset."""

from sharflow.core.logs import job_log
from sharflow.text.fields import TextSettings
from sharflow.text.job import normalize_dataset

# The guard keeps spawned worker processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        normalize_dataset(
            snakemake.input.records,
            records_stats=snakemake.input.records_stats,
            out_records=snakemake.output.records,
            rejected_dir=snakemake.output.rejected,
            stats=snakemake.output.stats,
            dataset=snakemake.wildcards.dataset,
            settings=TextSettings(**snakemake.params.settings),
            tokenizer=snakemake.params.tokenizer,
            cache_dir=snakemake.params.cache_dir,
            workers=snakemake.threads,
        )
