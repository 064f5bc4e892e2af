"""Snakemake adapter: sharflow.text.job.normalize_part."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import TextPartFiles
from sharflow.core.logs import job_log
from sharflow.text.fields import TextSettings
from sharflow.text.job import normalize_part

# The guard keeps spawned worker processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        normalize_part(
            snakemake.input.records,
            part=int(snakemake.wildcards.part),
            parts=snakemake.params.parts,
            out=TextPartFiles.of(snakemake.output),
            dataset=snakemake.wildcards.dataset,
            settings=TextSettings(**snakemake.params.settings),
            tokenizer=snakemake.params.tokenizer,
            cache_dir=snakemake.params.cache_dir,
            workers=snakemake.threads,
        )
