"""Snakemake adapter of the codes jobs (codes_block, codes_block<size>, codes_tail<n>, codes_shard):
sharflow.codes.shard.encode_shards over the job's shards, then the job's completion record."""

from sharflow.core.logs import job_log

# Spawned rank processes re-run this file as __mp_main__: the guard keeps them out of the body.
if __name__ == "__main__":
    from sharflow.codes.shard import encode_shards, job_shards
    from sharflow.codes.spec import read_codec_spec
    from sharflow.core.layout import block_members, dataset_files, write_job_record

    members = block_members(snakemake.wildcards.block, count=snakemake.params.shards)
    with job_log(snakemake.log[0]):
        encode_shards(
            job_shards(members, dataset_files(snakemake.wildcards.dataset).shard, snakemake.output),
            codec=read_codec_spec(snakemake.input.codec),
            batch_seconds=snakemake.params.batch_seconds,
            device=snakemake.params.device,
            workers=snakemake.threads,
            gpus=snakemake.resources.gpu,
        )
        write_job_record(snakemake.output.job, members)
