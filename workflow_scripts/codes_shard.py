"""Snakemake adapter: sharflow.codes.shard.encode_shard."""

from sharflow.core.logs import job_log

# Spawned rank processes re-run this file as __mp_main__: the guard keeps them out of the body.
if __name__ == "__main__":
    from sharflow.codes.shard import encode_shard
    from sharflow.codes.spec import read_codec_spec
    from sharflow.core.layout import CodesFiles

    with job_log(snakemake.log[0]):
        encode_shard(
            int(snakemake.wildcards.shard),
            target_tar=snakemake.input.target,
            context_tar=snakemake.input.context,
            out=CodesFiles.of(snakemake.output),
            codec=read_codec_spec(snakemake.input.codec),
            batch_seconds=snakemake.params.batch_seconds,
            device=snakemake.params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
        )
