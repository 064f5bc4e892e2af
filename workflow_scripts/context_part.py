"""Snakemake adapter: sharflow.context.part.run_context_part."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.context.part import MeasuredEmbeddings, PartSettings, run_context_part
from sharflow.core.layout import ContextPartFiles
from sharflow.core.logs import job_log

# The guard keeps spawned rank processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        run_context_part(
            int(snakemake.wildcards.part),
            prepared=snakemake.input.records,
            plan=snakemake.input.plan,
            out=ContextPartFiles.of(snakemake.output),
            settings=PartSettings(**snakemake.params.settings),
            device=snakemake.params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
            fit_ranks=snakemake.params.fit_ranks,
            out_embeddings=snakemake.output.get("embeddings"),
            out_embedding_ids=snakemake.output.get("embedding_ids"),
            measured=MeasuredEmbeddings.of(snakemake.input),
        )
