"""Snakemake adapter: sharflow.quality.part.run_quality_part."""

from sharflow.work.warm import hand_over

hand_over(globals(), heavy=True)  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import IdentityPartFiles, QualityPartFiles
from sharflow.core.logs import job_log
from sharflow.quality.part import measure_settings, run_quality_part

# The guard keeps spawned rank processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        out, params = QualityPartFiles.of(snakemake.output), snakemake.params
        run_quality_part(
            int(snakemake.wildcards.part),
            records=snakemake.input.records,
            parts=params.parts,
            out_metrics=out.metrics,
            out_stats=out.stats,
            settings=measure_settings(snakemake.wildcards.dataset, params),
            device=params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
            fit_ranks=params.fit_ranks,
            out_identity=IdentityPartFiles.of_optional(snakemake.output, prefix="identity_"),
            out_embeddings=out.embeddings,
            **params.last_run,  # previous, previous_embeddings
        )
