"""Snakemake adapter: sharflow.quality.part.run_quality_part."""

from sharflow.core.layout import IdentityPartFiles, QualityPartFiles
from sharflow.core.logs import job_log
from sharflow.identity.part import IdentityOptions, VoiceEmbedding
from sharflow.quality.part import AsrOptions, MeasureSettings, run_quality_part

# The guard keeps spawned rank processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        out = QualityPartFiles.of(snakemake.output)
        params = snakemake.params
        asr = AsrOptions(**params.asr) if params.asr else None
        identity, out_identity = None, None
        if params.identity:  # with identity: its part's files from the same decode
            voices = params.identity["voices"]
            identity = IdentityOptions(
                snakemake.wildcards.dataset,
                params.identity["own_speaker_ids"],
                VoiceEmbedding(**voices) if voices else None,
            )
            out_identity = IdentityPartFiles.of(snakemake.output, prefix="identity_")
        run_quality_part(
            int(snakemake.wildcards.part),
            records=snakemake.input.records,
            parts=params.parts,
            out_metrics=out.metrics,
            out_stats=out.stats,
            settings=MeasureSettings(
                params.audio_root, params.dnsmos_max_windows, asr, params.batch_seconds, identity
            ),
            device=params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
            previous=params.previous,
            out_identity=out_identity,
        )
