"""Snakemake adapter: sharflow.identity.part.run_identity_part."""

from sharflow.work.warm import hand_over

hand_over(globals())  # run as a fork of the run's warm server (sharflow.work.warm)

from sharflow.core.layout import IdentityPartFiles
from sharflow.core.logs import job_log
from sharflow.identity.part import VoiceEmbedding, run_identity_part

# The guard keeps spawned worker processes, which re-run this file as __mp_main__, out of the body.
if __name__ == "__main__":
    with job_log(snakemake.log[0]):
        out = IdentityPartFiles.of(snakemake.output)
        run_identity_part(
            int(snakemake.wildcards.part),
            records=snakemake.input.records,
            parts=snakemake.params.parts,
            audio_root=snakemake.params.audio_root,
            out_records=out.records,
            out_hashes=out.hashes,
            out_stats=out.stats,
            out_voices=out.voices,
            workers=snakemake.threads,
            dataset=snakemake.wildcards.dataset,
            own_speaker_ids=snakemake.params.own_speaker_ids,
            voices=VoiceEmbedding(**snakemake.params.voices) if snakemake.params.voices else None,
        )
