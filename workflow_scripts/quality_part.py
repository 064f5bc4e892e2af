"""Snakemake adapter: sharflow.quality.part.run_quality_part."""

from sharflow.core.layout import QualityPartFiles
from sharflow.core.logs import job_log
from sharflow.quality.part import AsrOptions, MeasureSettings, run_quality_part

# The guard keeps spawned rank processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        out = QualityPartFiles.of(snakemake.output)
        params = snakemake.params
        asr = AsrOptions(**params.asr) if params.asr else None
        run_quality_part(
            int(snakemake.wildcards.part),
            records=snakemake.input.records,
            parts=params.parts,
            out_metrics=out.metrics,
            out_stats=out.stats,
            settings=MeasureSettings(params.audio_root, params.dnsmos_max_windows, asr, params.batch_seconds),
            device=params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
            previous=params.previous,
        )
