"""What the first stages read: a long_form dataset's segment stage, prepare's corpus and settings, the
text stage's, and the files of every part of the text, quality and context stages.

Each method is an input function or a params function of a rule (rules/segment.smk, rules/prepare.smk,
rules/text.smk):
it takes Snakemake's `wildcards` (anything with attributes, e.g. SimpleNamespace(dataset="demo")) and
returns paths or plain values from the config and the layout.
"""

import functools
import hashlib
import json
import os

from sharflow.core import layout
from sharflow.io import containers, storage
from sharflow.io.containers import expand_shards
from sharflow.prepare.readers import container_suffix
from sharflow.segment.dataset import CUT_KEYS, TURN_KEYS, list_recordings, listing_form

TEXT_SETTINGS = (
    "require_text",
    "normalized_text",
    "unnormalizable",
    "tokenizer_names",
    "context_text",
    "ipa",
)


class Inputs:
    """Input and params functions of prepare, the recipe, the text stage and the stages' parts."""

    def __init__(self, run, on_first_look=lambda: None):
        self.run = run
        self.config = run.config
        self._on_first_look = on_first_look  # called by manifest(): every DAG asks it first

    # ---- segment (long_form datasets) --------------------------------------------------------
    def form(self, dataset: str) -> str:
        """The form prepare reads the dataset in (sharflow.prepare.readers): a recipe's lhotse manifests,
        a long_form dataset's NeMo manifest of segments, else the dataset's format."""
        if self.config["datasets"][dataset]["recipe"] is not None:
            return "lhotse"
        return "nemo" if self.run.long_form(dataset) else self.config["datasets"][dataset]["format"]

    @functools.cache  # noqa: B019 (one Inputs a run: a bucket is listed once per parse)
    def _recordings(self, dataset: str) -> tuple[str, ...]:
        ds = self.config["datasets"][dataset]
        return tuple(r.path for r in list_recordings(ds["audio_root"], ds["manifest"], ds["language"]))

    def recording_files(self, dataset: str) -> list[str]:
        """What a long_form dataset's recordings are read from: its JSON-lines listing, else the
        recordings' files or objects (a tar once for all its members), in order."""
        ds = self.config["datasets"][dataset]
        if listing_form(ds["manifest"]) == "listing":
            return [ds["manifest"]]
        root = ds["audio_root"]
        root = storage.normalize_url(root) if storage.is_url(root) else root.rstrip("/")
        held = (containers.split_member(path)[0] for path in self._recordings(dataset))
        return [f"{root}/{path}" for path in dict.fromkeys(held)]

    def segment_inputs(self, wildcards) -> list[str]:
        """The segment plan's local inputs: the listing of recordings, or the recordings' files (their
        tars) under a local root, so that a new or replaced recording plans again (Snakemake's file
        times); none on object storage (segment_listing's versions)."""
        return [f for f in self.recording_files(wildcards.dataset) if not storage.is_url(f)]

    def segment_listing(self, wildcards) -> dict:
        """Keyword arguments of sharflow.segment.dataset.list_recordings; for objects, a digest of their
        versions too (one listing per parse), so that a new or replaced object plans again."""
        ds = self.config["datasets"][wildcards.dataset]
        out = {"audio_root": ds["audio_root"], "listing": ds["manifest"], "language": ds["language"]}
        urls = [f for f in self.recording_files(wildcards.dataset) if storage.is_url(f)]
        if urls:
            etags = json.dumps([[u, storage.head(u).etag] for u in urls])
            out["versions"] = hashlib.sha256(etags.encode()).hexdigest()[:16]
        return out

    def segment_asr(self) -> tuple[str | None, bool]:
        """Where the segment stage's ASR model is (None: none), and whether the workflow builds it."""
        asr = self.config["segment"]["asr"]
        if asr["random_from_config"]:
            return layout.SEGMENT_ASR_MODEL, True
        return asr["model"], False

    def segment_asr_file(self, wildcards) -> list[str]:
        """The ASR model file as an input (a new model transcribes again), if it is a local file."""
        path, built = self.segment_asr()
        local = path is not None and not storage.is_url(path) and os.path.exists(path)
        return [path] if built or local else []

    def segment_settings(self, wildcards) -> dict:
        """What a recording's segments depend on (sharflow.segment.dataset.settings_of's arguments):
        the segment block's thresholds and the ASR options (None: no transcripts)."""
        block = self.config["segment"]
        path, built = self.segment_asr()
        asr = (
            {"model": path, "random": built, "batch_seconds": block["asr"]["batch_seconds"]} if path else None
        )
        return {"block": {k: block[k] for k in (*TURN_KEYS, *CUT_KEYS, "min_confidence")}, "asr": asr}

    def segment_work(self, wildcards) -> str:
        return layout.dataset_files(wildcards.dataset).segment_work

    def segment_parts(self, wildcards) -> list[str]:
        files = layout.dataset_files(wildcards.dataset)
        return [files.segment_part(p) for p in range(self.config["segment"]["parts"])]

    # ---- the cost plan's calibration -------------------------------------------------------------
    def calibration_source(self, wildcards) -> dict:
        """What a dataset's calibration sample is drawn from: its prepared records, or a long_form
        dataset's segment plan (its recordings' lengths: the calibration segments a sample of them)."""
        files = layout.dataset_files(wildcards.dataset)
        if self.run.long_form(wildcards.dataset):
            return {"plan": files.segment_plan}
        return {"prepared": files.prepared}

    def plan_inputs(self, dataset: str) -> list[str]:
        """The files a cost plan of the dataset was made from (its key: sharflow.plan.key): what prepare
        reads, or a long_form dataset's listing or recordings (its segments are cut after the plan)."""
        return self.recording_files(dataset) if self.run.long_form(dataset) else self.corpus_files(dataset)

    # ---- prepare ------------------------------------------------------------------------------
    def dataset_inputs(self, dataset: str) -> dict:
        """{manifest, recordings} that prepare reads: the config's, a recipe's own manifests, or the
        segment stage's manifest of a long_form dataset."""
        ds = self.config["datasets"][dataset]
        if ds["recipe"] is not None:
            files = layout.dataset_files(dataset)
            return {"manifest": files.recipe_supervisions, "recordings": files.recipe_recordings}
        if self.run.long_form(dataset):
            return {"manifest": layout.dataset_files(dataset).segment_manifest, "recordings": None}
        return {"manifest": ds["manifest"], "recordings": ds["recordings"]}

    @functools.cache  # noqa: B019 (one Inputs a run: a bucket is listed once per parse)
    def corpus_files(self, dataset: str) -> list[str]:
        """The files prepare reads the dataset from, as paths or URLs: its containers (a folder or a
        bucket listed once per parse), else its manifest and recordings (a recipe's own manifests)."""
        ds = self.config["datasets"][dataset]
        if container_suffix(self.form(dataset)):
            return expand_shards(ds["manifest"], ds["audio_root"], container_suffix(ds["format"]))
        return [p for p in self.dataset_inputs(dataset).values() if p is not None]

    def manifest(self, wildcards) -> list[str]:
        """The prepare job's inputs: local manifests or tars (Snakemake watches their times: a new tar
        or Parquet file is a grown corpus, and prepare runs again); none for a URL. (In a dry run, the
        first call also logs the stages the shard plan hides: sharflow.workflow.look.)"""
        self._on_first_look()
        return [f for f in self.corpus_files(wildcards.dataset) if not storage.is_url(f)]

    def manifest_version(self, wildcards):
        """A URL manifest's ETag (one HEAD request): a param, so that a replaced object reruns prepare."""
        files = self.corpus_files(wildcards.dataset)
        if container_suffix(self.form(wildcards.dataset)):  # each object's ETag
            return [storage.head(f).etag for f in files if storage.is_url(f)] or None
        versions = [storage.head(p).etag if storage.is_url(p) else None for p in files]
        return versions[0] if len(versions) == 1 else versions

    def audio_root(self, wildcards) -> str:
        return self.config["datasets"][wildcards.dataset]["audio_root"]

    def prepare_settings(self, wildcards) -> dict:
        """Keyword arguments of sharflow.prepare.prepare_dataset, from the dataset's config."""
        ds = self.config["datasets"][wildcards.dataset]
        inputs = self.dataset_inputs(wildcards.dataset)
        lhotse = {
            "form": self.form(wildcards.dataset),
            "recordings": inputs["recordings"],
            "default_speaker": ds["default_speaker"],
            "fields": ds["fields"] if container_suffix(self.form(wildcards.dataset)) else None,
            "extra_fields": ds["extra_fields"],
        }
        prepare = self.config["prepare"]
        return {
            "dataset": wildcards.dataset,
            "manifest": inputs["manifest"],
            **{k: ds[k] for k in ("audio_root", "language", "require_text")},
            **{k: prepare[k] for k in ("duration_tolerance", "duration_from_file", "max_rejected_fraction")},
            # only when set: a NeMo-manifest dataset's params stay as they were (no rerun after an upgrade)
            **{k: v for k, v in lhotse.items() if v not in (None, "nemo")},
        }

    def recipe_settings(self, wildcards) -> dict:
        """Keyword arguments of sharflow.prepare.recipe.run_recipe, from the dataset's config."""
        ds = self.config["datasets"][wildcards.dataset]
        return {
            "dataset": wildcards.dataset,
            "name": ds["recipe"],
            "corpus_dir": ds["audio_root"],
            "options": ds["recipe_options"],
        }

    # ---- text ---------------------------------------------------------------------------------
    def text_settings(self, wildcards) -> dict:
        """Fields of sharflow.text.fields.TextSettings for the dataset."""
        return {k: self.config["datasets"][wildcards.dataset][k] for k in TEXT_SETTINGS}

    def text_normalizers(self, wildcards) -> list[str]:
        """The text_normalizer job of the dataset's language, when its records may need the normalizer
        (records in other languages load theirs in the text job, from the same cache)."""
        ds = self.config["datasets"][wildcards.dataset]
        if ds["normalized_text"] in ("check_manifest", "keep_manifest", "normalizer"):
            return [layout.text_normalizer(ds["language"])]
        return []

    # ---- parts of the text, quality and context stages ---------------------------------------
    def part_files(self, stage: str, kind: str):
        """Input function: file `kind` (records, rejected, metrics, stats) of every part of `stage`
        (text, quality, context)."""

        def parts(wildcards):
            files = layout.dataset_files(wildcards.dataset)
            part = {"text": files.text_part, "quality": files.quality_part, "context": files.context_part}[
                stage
            ]
            return [getattr(part(p), kind) for p in range(self.config[stage]["parts"])]

        return parts
