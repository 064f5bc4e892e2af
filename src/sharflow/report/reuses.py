"""Every result sharflow reuses instead of computing again, with what its key holds.

A reuse is a promise that nothing the result depends on has changed. Each entry below names the
code that makes the key (`where`), everything the key holds (`key`: change one and the result is
computed again) and what the result must not depend on (`free`: change one and it is reused).
`tests/test_reuses.py` changes each of them alone, per entry (the key, and for most entries the
result through the code that uses the key: EFFECTS there), and fails for an entry without its
rows, for a row without its entry, and for a key made by code that no entry names (the call sites
of the key-making functions in `KEY_MAKERS`). The docs' reference page "Reused results" is made
from this table (sharflow.report.reference).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Reuse:
    """One reused result: what it is, the code that keys it, what its key holds and what it must not
    depend on."""

    name: str
    result: str
    where: tuple[str, ...]
    key: tuple[str, ...]
    free: tuple[str, ...]


REUSES: tuple[Reuse, ...] = (
    Reuse(
        "normalizer grammars",
        "NeMo's compiled text-normalizer grammars of a language, in sharflow's cache (built once, ~30-50 s)",
        ("sharflow.text.normalizer.normalizer_key",),
        ("language", "nemo_text_processing version", "pynini version", "normalizer options"),
        ("the cache root",),
    ),
    Reuse(
        "english phoneme dictionary",
        "the IPA dictionary english_phoneme reads, built from cmudict into sharflow's cache (~2 s)",
        ("sharflow.models.phoneme_dict.dictionary_key", "sharflow.models.phoneme_dict.ipa_dictionary"),
        ("cmudict version", "the conversion's VERSION"),
        ("the cache root",),
    ),
    Reuse(
        "quality measures",
        "a record's metrics line from the last run of the quality stage (DNSMOS, VAD, signal, ASR) and its"
        " row of speaker embeddings for the context stage (quality/embeddings.npy, the same line's)",
        (
            "sharflow.quality.reuse.record_key",
            "sharflow.quality.reuse.measure_digest",
            "sharflow.io.containers.stamp",  # a tar member's: its tar's size and mtime, its offset there
        ),
        (
            "audio_filepath",
            "offset",
            "duration",
            "audio file size",
            "audio file mtime (ETag for an object)",
            "spoken text (normalized_text, else text)",
            "dnsmos_max_windows",
            "ASR model (a file by its size and mtime)",
            "ASR random weights",
            "DNSMOS engine",
            "speaker embedder (context.embedder, a file by its size and mtime)",
            "speaker embedder options (a file by its size and mtime)",
            "EMBEDDING_VERSION",
            "MEASURES_VERSION",
            "measuring packages' versions",
        ),
        ("the audio root", "batch_seconds", "the record's line", "the record's speaker"),
    ),
    Reuse(
        "identity fingerprints and voices",
        "a record's content fingerprint, sample digest and voice embedding from the last run of its"
        " identity part (written by its quality part, from the decode it measures, with quality on;"
        " the record is decoded again when its metrics or this entry is not kept)",
        (
            "sharflow.identity.part.identity_key",
            "sharflow.identity.part.entry_key",
            "sharflow.identity.part.measure_signature",
            "sharflow.io.containers.stamp",
        ),
        (
            "audio_filepath",
            "offset",
            "duration",
            "audio file size",
            "audio file mtime (ETag for an object)",
            "fingerprint VERSION",
            "decoding and fingerprint packages' versions",
            "embedder (a file by its size and mtime)",
            "embedder options (a file by its size and mtime)",
            "EMBEDDING_VERSION",
            "embedding packages' versions",
        ),
        ("the record's line", "the record's text", "the record's speaker"),
    ),
    Reuse(
        "speaker decisions",
        "a pair of speakers decided linked or not linked by voice in an earlier run (kept, not re-decided)",
        ("sharflow.identity.voices.VoiceRules.digest",),
        ("min_similarity", "min_seconds", "embedder (a file by its size and mtime)", "embedder options"),
        ("confirm", "deny", "enabled"),
    ),
    Reuse(
        "publish file digests",
        "a file's ETag and SHA-256 from the last publish (the file is not read again)",
        ("sharflow.publish.job._digests",),
        ("file path", "file size", "file mtime", "part size"),
        ("the publish URL", "publish workers"),
    ),
    Reuse(
        "published objects",
        "an object already in the bucket (not uploaded again)",
        ("sharflow.publish.job._is_there",),
        ("object size", "object ETag (the file's bytes' ETag, or the store's for the same SHA-256)"),
        ("the file's mtime",),
    ),
    Reuse(
        "object cache",
        "the local copy of a loose object (s3:// audio or manifest), downloaded once per object version"
        " into the bounded cache (sharflow.io.object_cache evicts copies no job holds)",
        ("sharflow.io.storage.local_file",),
        ("object URL", "object ETag", "object size"),
        ("the local copy's mtime",),
    ),
    Reuse(
        "tar member indexes",
        "a WebDataset tar's member index (name -> data offset, size) in sharflow's cache, built once per"
        " tar version (by prepare's pass over the tar, else by the first job that reads it)",
        (
            "sharflow.io.containers.tar_index_key",
            "sharflow.io.containers.tar_index",
            "sharflow.io.containers.remember_tar_index",
        ),
        ("tar path", "tar size", "tar mtime", "tar ctime (a tar rewritten at its size and mtime)"),
        ("reading the tar (its access time)",),
    ),
    Reuse(
        "object tar indexes",
        "a tar's member index on object storage, kept under its URL with the size and ETag it is of:"
        " prepare's stream over the tar keeps it (again when the ETag changed), a job reads members"
        " against it asking for that ETag (If-Match: an object replaced since fails, and its index is"
        " dropped)",
        (
            "sharflow.io.containers.tar_index",
            "sharflow.io.containers.remember_tar_index",
        ),
        ("object URL", "object ETag", "object size"),
        ("a job reading its members",),
    ),
    Reuse(
        "kept shar shards",
        "a shar shard's files, put back by its job's rerun (killed, or run again for another shard of "
        "its block) when its records and settings are what it was made from",
        ("sharflow.shar.shard.shard_keys",),
        ("a record's line", "the records' order", "a record added", "encode settings"),
        ("another shard's records", "the job's inputs file's time", "the audio root"),
    ),
    Reuse(
        "kept shard audio",
        "a shar shard's target and context audio, kept when only its records' text or other metadata "
        "changed (its cuts, catalog fragment and stats are written again)",
        ("sharflow.shar.shard.shard_keys",),
        ("a record's audio span", "a record's context clip", "the records' order", "encode settings"),
        ("a record's text", "a record's speaker", "a record's quality metrics", "the audio root"),
    ),
    Reuse(
        "kept codes shards",
        "a shard's codes of one codec, put back by its codes job's rerun when its audio and codec are "
        "what they were made from",
        ("sharflow.codes.shard.codes_key",),
        ("the shard's audio key", "the codec spec", "the codec model file", "codes.batch_seconds"),
        ("the shard's cuts", "the shar job's record"),
    ),
    Reuse(
        "the plan's kept generations",
        "the shards of records already planned, kept as the corpus grows (grow: append), each record's "
        "line in its shard kept unless the record was corrected",
        (
            "sharflow.shar.plan._earlier_plan",
            "sharflow.shar.plan.content_key",
            "sharflow.shar.plan._keep",
            "sharflow.shar.plan._correction",
        ),
        (
            "shard_size",
            "seed",
            "shards_per_job",
            "grow",
            "a record's text",
            "a record's normalized_text",
            "a record's speaker",
            "a record's lang",
            "a record's tokenizer_names",
            "a record's source_audio",
            "its context clip's text",
        ),
        ("a record's quality metrics", "a record's context choice"),
    ),
    Reuse(
        "job records",
        "a finished shard job (its record vouches for its files: the job is not run again)",
        ("sharflow.work.jobs.damage",),
        ("each file's presence", "each file's size"),
        ("each file's mtime (a file damaged in place at its size is found by verify's whole-shard read)",),
    ),
    Reuse(
        "the cost plan's resources",
        "every rule's mem_mb and runtime from the cost plan (results/plan/resources.yaml), asked of Slurm",
        (
            "sharflow.plan.key.key_now",
            "sharflow.plan.key.plan_key",
            "sharflow.plan.resources.PlannedResources",
        ),
        (
            "a config value that changes cost",
            "another codec",
            "a dataset's manifest (size and mtime, ETag for an object)",
            "a dataset's record count",
            "a dataset added",
            "sharflow's version and source",
        ),
        ("a dataset's training weight", "a dataset's tags", "training.path_prefix"),
    ),
    Reuse(
        "random models",
        "a random NeMo model of a random_from_config key (codec, ASR), built once per config in sharflow's"
        " cache and copied to results/models/ (a build costs NeMo's import, ~15 s)",
        ("sharflow.models.random_init.random_model_key", "sharflow.models.random_init.cached_random_model"),
        (
            "the config's text",
            "the builder's source file",
            "random_init's source file",
            "nemo_toolkit version",
            "torch version",
        ),
        ("the cache root", "where the model is copied to"),
    ),
    Reuse(
        "segment results",
        "a long recording's segments, speakers' voices, transcripts and accounting from a segment job "
        "(segment/work/<settings>/<recording>.json): a killed or rerun job resumes after it",
        ("sharflow.segment.dataset.settings_key", "sharflow.segment.dataset.plan_segments"),
        (
            "a threshold of the segment block",
            "the ASR model",
            "the ASR model file's size and mtime",
            "the result format",
            "the recording's path",
            "the recording's size and mtime (ETag for an object)",
        ),
        ("the ASR's batch seconds", "the recording's known speaker names", "the recording's language"),
    ),
)

# The functions whose every call makes a reuse key: a call from code that no entry's `where` names is a
# reuse without its row (tests/test_reuses.py).
KEY_MAKERS = (
    "cached_build",
    "stamp",
    "_stamp",  # the publish job's and work.resume's own
    "file_identity",
    "package_versions",
    "content_key",
    "tar_index_key",
)
