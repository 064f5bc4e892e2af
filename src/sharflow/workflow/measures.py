"""What the measuring and deciding stages read: quality (its models, the ASR check, the last run),
identity (every dataset's parts, the check parts), splits and context.

Each method is an input function or a params function of a rule (rules/quality.smk,
rules/identity.smk, rules/splits.smk, rules/context.smk), over the config and the layout.
"""

import os

from sharflow.core import layout

PART_SETTINGS = (
    "embedder",
    "embedder_options",
    "min_similarity",
    "min_context_duration",
    "max_context_duration",
    "top_k",
    "block_rows",
    "embed_batch",
    "save_embeddings",
)


class Measures:
    """Input and params functions of quality, identity, splits and context."""

    def __init__(self, run):
        self.run = run
        self.config = run.config

    # ---- quality ------------------------------------------------------------------------------
    def random_asr_config(self, wildcards) -> str:
        """The config of the random ASR model `wildcards.asr` (random: quality.asr's; segment.asr's)."""
        section = "segment" if wildcards.asr == "segment" else "quality"
        config = self.run.config[section]["asr"]["random_from_config"]
        if config is None:
            raise ValueError(f"{section}.asr has no random_from_config; nothing to build")
        return config

    def _asr_model_path(self) -> tuple[str | None, bool]:
        """Where the ASR model is (None: no ASR check), and whether the workflow builds it."""
        if self.run.asr["random_from_config"]:
            return layout.ASR_MODEL, True
        return self.run.asr["model"], False

    def asr_model_file(self, wildcards) -> list[str]:
        """The ASR model file as an input (so a new model remeasures), if it is a local file."""
        path, built = self._asr_model_path()
        return [path] if path and (built or os.path.exists(path)) else []

    def asr_options(self, wildcards) -> dict | None:
        """Fields of sharflow.quality.part.AsrOptions, or None without the ASR check."""
        path, built = self._asr_model_path()
        if path is None:
            return None
        return {"model": path, "batch_seconds": self.run.asr["batch_seconds"], "random": built}

    def quality_part_outputs(self) -> tuple[dict, dict]:
        """(a quality part's files, the identity part's files it also writes with identity on): the
        second are `update()` outputs in the rule (its last run's entries are kept while the job runs,
        and reused by key)."""
        files = layout.dataset_files("{dataset}").quality_part("{part}").named()
        identity = {}
        if self.run.identity and self.run.quality:
            parts = layout.dataset_files("{dataset}").identity_part("{part}").named()
            identity = {f"identity_{name}": path for name, path in parts.items()}
        return files, identity

    def last_quality_run(self, wildcards) -> dict:
        """run_quality_part's `previous` and `previous_embeddings`: the dataset's merged metrics and
        embedding rows of the last run (the merge's outputs, still on disk while the parts run)."""
        files = layout.dataset_files(wildcards.dataset)
        return {"previous": files.quality_metrics, "previous_embeddings": files.quality_embeddings}

    def speaker_embedding(self, wildcards) -> dict:
        """Fields of sharflow.quality.rank.SpeakerEmbedding: the context stage's embedder, which the
        quality parts run."""
        options = self.config["context"]["embedder_options"]
        return {"name": self.config["context"]["embedder"], "options": tuple(sorted(options.items()))}

    def voice_embedding(self, wildcards) -> dict | None:
        """Fields of sharflow.identity.part.VoiceEmbedding (identity.voices), or None without voices."""
        voices = self.config["identity"]["voices"]
        if not voices["enabled"]:
            return None
        return {"embedder": voices["embedder"], "options": tuple(sorted(voices["embedder_options"].items()))}

    def identity_options(self, wildcards) -> dict | None:
        """With identity, fields of sharflow.identity.part.IdentityOptions for a quality part (which
        writes the dataset's identity parts), else None."""
        if not self.run.identity:
            return None
        return {"own_speaker_ids": self.own_speaker_ids(wildcards), "voices": self.voice_embedding(wildcards)}

    # ---- splits -------------------------------------------------------------------------------
    def splits_inputs(self, wildcards) -> dict:
        """The dataset's records and their stats; with identity, the identity job's links (of every
        dataset) and the dataset's own identity parts (each record's identity fields)."""
        records, stats = self.run.measured_records(wildcards.dataset)
        if not self.run.identity:
            return {"records": records, "records_stats": stats}
        files = layout.dataset_files(wildcards.dataset)
        parts = [files.identity_part(p).records for p in range(self.run.identity_parts)]
        return {"records": records, "records_stats": stats, "links": layout.IDENTITY_LINKS, "identity": parts}

    def split_dataset(self, wildcards) -> dict:
        """Fields of sharflow.splits.stage.DatasetSplits for the dataset."""
        ds = wildcards.dataset
        return {
            "records": self.run.measured_records(ds)[0],
            "audio_root": self.config["datasets"][ds]["audio_root"],
            "rules": self.run.split_block(ds),
            "own_speaker_ids": self.config["datasets"][ds]["speaker_ids"] == "own",
        }

    def own_speaker_ids(self, wildcards) -> bool:
        """Whether the dataset's speaker ids are its own (datasets.<name>.speaker_ids: own)."""
        return self.config["datasets"][wildcards.dataset]["speaker_ids"] == "own"

    def empty_split_action(self, wildcards) -> str:
        """splits.empty of the dataset's block: warn (the default) or error."""
        return self.run.split_block(wildcards.dataset).get("empty", "warn")

    # ---- identity -----------------------------------------------------------------------------
    def identity_part_files(self, kind: str):
        """Input function: file `kind` (records, hashes) of every identity part of every dataset."""

        def parts(wildcards):
            return [
                getattr(layout.dataset_files(ds).identity_part(p), kind)
                for ds in self.run.datasets
                for p in range(self.run.identity_parts)
            ]

        return parts

    def identity_checks(self, kind: str):
        """Input function: file `kind` (links, stats) of every identity check part."""
        parts = self.config["identity"]["check_parts"]
        return lambda wildcards: [getattr(layout.identity_check(p), kind) for p in range(parts)]

    def identity_datasets(self, wildcards, voices: bool | None = None) -> dict:
        """Fields of sharflow.identity.links.DatasetIdentity for every dataset (the parts' voices with
        identity.voices, unless `voices` is False: the check parts read none)."""
        voices = self.config["identity"]["voices"]["enabled"] if voices is None else voices
        return {
            ds: {
                "parts": [
                    [f.records, f.hashes, *([f.voices] if voices else [])]
                    for f in map(layout.dataset_files(ds).identity_part, range(self.run.identity_parts))
                ],
                "rules": self.run.split_block(ds),
            }
            for ds in self.run.datasets
        }

    # ---- context ------------------------------------------------------------------------------
    def context_records(self, wildcards) -> str:
        """The records the context stage reads: the splits job's (with splits configured), else
        quality's kept.jsonl, or prepared.jsonl without quality."""
        if self.run.splits:
            return layout.dataset_files(wildcards.dataset).split_records
        return self.run.measured_records(wildcards.dataset)[0]

    def context_records_stats(self, wildcards) -> str:
        """The stats (records_out) of the stage before context."""
        if self.run.splits:
            return layout.dataset_files(wildcards.dataset).split_stats
        return self.run.measured_records(wildcards.dataset)[1]

    def grouping(self, wildcards) -> dict:
        """Arguments of sharflow.context.grouping.group_key_function for the dataset."""
        ds = self.config["datasets"][wildcards.dataset]
        return {
            "preset": ds["speaker_preset"],
            "regex": ds["speaker_regex"],
            "field": ds["speaker_regex_field"],
        }

    def context_part_settings(self, wildcards) -> dict:
        """Fields of sharflow.context.part.PartSettings for the dataset."""
        audio_root = self.config["datasets"][wildcards.dataset]["audio_root"]
        return {"audio_root": audio_root, **{k: self.config["context"][k] for k in PART_SETTINGS}}

    def measured_embeddings(self, wildcards) -> dict:
        """With quality on, the quality stage's embeddings of every record and the records they are
        rows of (sharflow.context.part.MeasuredEmbeddings), which the context parts read; else none."""
        if not self.run.quality:
            return {}
        files = layout.dataset_files(wildcards.dataset)
        return {"measured_records": files.text_records, "embeddings": files.quality_embeddings}

    def embedding_outputs(self) -> dict:
        """Extra outputs of context_part when context.save_embeddings is on."""
        if not self.config["context"]["save_embeddings"]:
            return {}
        return layout.dataset_files("{dataset}").context_embeddings("{part}")
