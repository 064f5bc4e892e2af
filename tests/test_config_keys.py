"""Every config key takes effect: a test per key of config/schema.yaml.

Changing a key from its default to another valid value changes what it should (the files or values the
key governs, named in its test); a key whose only effect is speed or resources (workers, parts,
device, batch sizes) is shown instead to leave the outputs byte-identical on this machine's one kind
of device. EFFECTS maps every key (the list comes from the schema itself) to the test that shows it:
one here, or one elsewhere in the suite named by file and function. A key without a test fails
test_every_schema_key_has_an_effect_test.
"""

import ast
import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import yaml

from sharflow.codes.shard import ShardCodes, encode_shards
from sharflow.codes.spec import CodecSpec, cached_codec
from sharflow.context.plan import plan_context
from sharflow.core import layout
from sharflow.core.config import load_schema, schema_keys
from sharflow.core.layout import DatasetFiles
from sharflow.dataset.training import write_input_cfg
from sharflow.models.codecs import autocast
from sharflow.prepare.job import prepare_dataset
from sharflow.quality.part import MeasureSettings, run_quality_part
from sharflow.shar.audio import EncodeSettings, copy_through
from sharflow.shar.plan import plan_shards
from testkit import (
    DEMO,
    REPO,
    demo_config,
    planned_lines,
    read_jsonl,
    run_command,
    snakemake_cmd,
    write_jsonl,
    write_tone,
)

SCHEMA = REPO / "config" / "schema.yaml"
HERE = "test_config_keys.py"
QUALITY_BYTES = "test_metrics_are_byte_identical_for_any_parts_ranks_workers_and_batch_seconds"
SEGMENT_BYTES = (
    "test_the_segment_jobs_give_the_same_manifest_for_any_parts_and_ranks_and_account_for_every_second"
)

# key -> "file::test" that shows its effect (this file's tests are named after their key)
EFFECTS: dict[str, str] = {
    "datasets.<name>.manifest": f"{HERE}::test_manifest_and_audio_root_are_what_prepare_reads",
    "datasets.<name>.audio_root": f"{HERE}::test_manifest_and_audio_root_are_what_prepare_reads",
    "datasets.<name>.format": "test_corpora.py::"
    "test_lhotse_supervisions_and_cuts_prepare_to_the_nemo_manifests_records",
    "datasets.<name>.recordings": "test_corpora.py::"
    "test_lhotse_supervisions_and_cuts_prepare_to_the_nemo_manifests_records",
    "datasets.<name>.recipe": "test_corpora.py::"
    "test_a_lhotse_recipe_runs_by_name_as_the_first_job_of_the_workflow",
    "datasets.<name>.recipe_options": "test_corpora.py::"
    "test_recipe_options_reach_the_recipe_and_parts_come_in_sorted_order",
    "datasets.<name>.fields.text": "test_corpora.py::"
    "test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along",
    "datasets.<name>.fields.speaker": "test_corpora.py::"
    "test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along",
    "datasets.<name>.fields.duration": "test_corpora.py::"
    "test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along",
    "datasets.<name>.fields.language": "test_corpora.py::"
    "test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along",
    "datasets.<name>.fields.audio": "test_corpora.py::test_the_audio_column_is_the_one_fields_names",
    "datasets.<name>.extra_fields": "test_corpora.py::"
    "test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along",
    "datasets.<name>.default_speaker": "test_corpora.py::"
    "test_default_speaker_names_the_speaker_of_records_without_one",
    "datasets.<name>.language": f"{HERE}::test_language_and_require_text_shape_the_prepared_records",
    "datasets.<name>.require_text": f"{HERE}::test_language_and_require_text_shape_the_prepared_records",
    "datasets.<name>.tokenizer_names": "test_text.py::"
    "test_lang_and_tokenizers_come_from_the_record_the_dataset_or_nemos_map",
    "datasets.<name>.normalized_text": "test_text.py::test_who_wins_is_the_datasets_policy",
    "datasets.<name>.unnormalizable": "test_text.py::test_each_bad_text_is_rejected_with_its_reason",
    "datasets.<name>.ipa": "test_text.py::test_ipa_is_espeak_ngs_and_repeatable",
    "datasets.<name>.context_text": "test_text.py::"
    "test_context_text_is_the_records_or_the_datasets_never_invented",
    "text.cache_dir": f"{HERE}::test_text_keys_reach_the_text_jobs",
    "text.parts": f"{HERE}::test_text_keys_reach_the_text_jobs",
    "text.workers": "test_text.py::"
    "test_the_stage_accounts_for_every_record_and_any_worker_count_gives_the_same_bytes",
    "datasets.<name>.speaker_preset": "test_grouping.py::test_libritts_is_speaker_by_chapter",
    "datasets.<name>.speaker_regex": "test_grouping.py::test_regex_over_path_or_speaker",
    "datasets.<name>.speaker_regex_field": "test_grouping.py::test_regex_over_path_or_speaker",
    "datasets.<name>.weight": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "datasets.<name>.tags": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "datasets.<name>.splits": "test_splits.py::"
    "test_splits_in_the_workflow_keep_held_out_audio_out_of_train_and_its_contexts",
    "splits.seed": "test_splits.py::test_adding_utterances_and_speakers_moves_no_earlier_assignment",
    **{
        f"splits.{split}.fraction": "test_splits.py::"
        "test_unseen_speakers_are_never_in_train_and_seen_split_speakers_are"
        for split in ("dev_unseen", "test_unseen", "dev_seen", "test_seen")
    },
    **{
        f"splits.{split}.{listed}": "test_splits.py::test_listed_speakers_and_utterances_win_over_the_hash"
        for split, listed in (
            ("dev_unseen", "speakers"),
            ("test_unseen", "speakers"),
            ("dev_seen", "utterances"),
            ("test_seen", "utterances"),
        )
    },
    "splits.empty": "test_identity.py::test_a_split_that_selects_nothing_is_said_and_can_stop_the_run",
    "datasets.<name>.speaker_ids": "test_identity.py::"
    "test_the_same_speaker_and_text_is_one_utterance_and_another_voice_reading_it_is_not",
    "identity.enabled": f"{HERE}::test_identity_enabled_adds_the_identity_jobs_only_with_splits",
    "identity.parts": "test_identity.py::test_any_parts_and_workers_give_the_same_fingerprints_and_links",
    "identity.check_parts": f"{HERE}::test_identity_enabled_adds_the_identity_jobs_only_with_splits",
    "identity.workers": "test_identity.py::test_any_parts_and_workers_give_the_same_fingerprints_and_links",
    "identity.min_score": "test_identity.py::test_the_match_thresholds_decide_what_is_one_content",
    "identity.min_matched": "test_identity.py::test_the_match_thresholds_decide_what_is_one_content",
    "identity.train_duplicates": "test_identity.py::"
    "test_exact_duplicates_within_train_are_kept_dropped_or_marked",
    "identity.voices.enabled": "test_identity.py::"
    "test_an_unseen_speaker_under_another_id_is_linked_by_voice_and_the_closest_other_voice_is_not",
    "identity.voices.embedder": f"{HERE}::test_identity_voice_keys_reach_the_identity_jobs",
    "identity.voices.embedder_options": f"{HERE}::test_identity_voice_keys_reach_the_identity_jobs",
    "identity.voices.min_similarity": "test_identity.py::"
    "test_a_pair_is_decided_once_and_stays_decided_as_its_voices_drift",
    "identity.voices.min_seconds": "test_identity.py::"
    "test_a_pair_is_decided_once_and_stays_decided_as_its_voices_drift",
    "identity.voices.confirm": "test_identity.py::"
    "test_the_same_id_in_datasets_that_share_ids_is_one_person_and_the_config_decides_a_pair",
    "identity.voices.deny": "test_identity.py::"
    "test_the_same_id_in_datasets_that_share_ids_is_one_person_and_the_config_decides_a_pair",
    "prepare.workers": "test_prepare.py::test_serial_and_parallel_runs_are_byte_identical",
    "prepare.duration_tolerance": "test_manifest.py::"
    "test_duration_tolerance_at_the_value_and_one_ulp_either_side",
    "prepare.duration_from_file": "test_shar.py::"
    "test_rounded_manifest_durations_copy_through_with_duration_from_file",
    "prepare.max_rejected_fraction": "test_prepare.py::"
    "test_max_rejected_fraction_at_the_value_and_one_ulp_below",
    "quality.enabled": f"{HERE}::test_keys_that_change_which_jobs_run",
    **{
        f"segment.{key}": "test_segment.py::test_each_threshold_of_the_segment_block_changes_the_segments"
        for key in (
            "min_pause",
            "max_pause",
            "min_segment",
            "max_segment",
            "cluster_similarity",
            "min_speaker_seconds",
            "attribute_similarity",
            "overlap_share",
            "min_overlap",
        )
    },
    **{f"segment.{key}": f"test_segment.py::{SEGMENT_BYTES}" for key in ("parts", "workers", "device")},
    "segment.link_similarity": "test_segment.py::"
    "test_a_long_form_dataset_runs_the_workflow_to_verified_shar_that_magpietts_reads",
    "segment.min_confidence": "test_asr.py::"
    "test_a_recordings_segments_get_transcripts_and_the_least_confident_are_dropped",
    "segment.asr.model": "test_workflow_inputs.py::"
    "test_a_long_form_dataset_is_planned_segmented_merged_then_prepared",
    "segment.asr.random_from_config": "test_segment.py::"
    "test_a_long_form_dataset_runs_the_workflow_to_verified_shar_that_magpietts_reads",
    "segment.asr.batch_seconds": "test_asr.py::"
    "test_transcripts_come_with_nemos_token_confidence_independent_of_the_batch",
    "quality.parts": f"test_quality.py::{QUALITY_BYTES}",
    "quality.workers": f"test_quality.py::{QUALITY_BYTES}",
    "quality.device": f"{HERE}::test_quality_device_leaves_the_metrics_as_they_are",
    "quality.batch_seconds": f"test_quality.py::{QUALITY_BYTES}",
    "quality.dnsmos_max_windows": "test_quality.py::test_dnsmos_windows_follow_the_models_window_and_hop",
    "quality.asr.model": "test_asr.py::test_asr_fields_do_not_depend_on_batches_or_ranks",
    "quality.asr.random_from_config": f"{HERE}::test_keys_that_change_which_jobs_run",
    "quality.asr.batch_seconds": "test_asr.py::test_asr_fields_do_not_depend_on_batches_or_ranks",
    "quality.action": "test_quality.py::test_drop_rejects_with_reasons_and_mark_keeps_with_a_status",
    "quality.filters": "test_quality.py::test_thresholds_pass_at_the_value_and_fail_on_the_wrong_side",
    "context.embedder": "test_nemo_embedder.py::test_the_embedder_key_chooses_the_backend",
    "context.embedder_options": "test_ge2e.py::test_embedder_options_choose_the_weights",
    "context.device": f"{HERE}::test_context_device_leaves_the_choices_as_they_are",
    "context.min_similarity": "test_selection.py::test_thresholds_at_the_value_itself_and_on_each_side",
    "context.min_context_duration": "test_selection.py::test_thresholds_at_the_value_itself_and_on_each_side",
    "context.max_context_duration": "test_selection.py::test_thresholds_at_the_value_itself_and_on_each_side",
    "context.top_k": "test_selection.py::test_topk_equals_exhaustive",
    "context.block_rows": "test_selection.py::test_blocks_of_any_size_give_the_same_selection",
    "context.embed_batch": "test_ge2e.py::test_an_embedding_is_the_same_bytes_alone_or_among_others",
    "context.parts": "test_context.py::test_parts_and_ranks_do_not_change_the_bytes",
    "context.workers": "test_context.py::test_parts_and_ranks_do_not_change_the_bytes",
    "context.save_embeddings": "test_context.py::test_saved_embeddings_match_their_ids",
    "context.cost_per_audio_second": f"{HERE}::test_cost_per_audio_second_moves_groups_between_parts",
    "shar.shard_size": "test_shar.py::test_shard_plans_cover_every_record_once_for_any_size",
    "shar.seed": f"{HERE}::test_shar_seed_orders_the_shards",
    "shar.grow": "test_grow.py::test_other_audio_under_a_planned_cut_id_stops_the_plan",
    "shar.leaks": "test_grow.py::"
    "test_a_record_in_a_shard_found_to_be_held_out_is_reported_and_remade_only_when_asked",
    "shar.audio_format": "test_shar.py::test_other_formats_and_rates_read_back",
    "shar.sample_rate": "test_shar.py::test_other_formats_and_rates_read_back",
    "shar.copy_through": f"{HERE}::test_copy_through_off_encodes_every_span",
    "shar.index": "test_shar.py::test_shar_index_false_writes_the_set_as_before_indexes",
    "shar.workers": "test_shar.py::test_same_bytes_for_any_worker_count",
    "codecs.<name>.backend": "test_codecs.py::test_the_backend_key_chooses_the_codec",
    "codecs.<name>.model": "test_codecs.py::test_another_model_gives_other_codes",
    "codecs.<name>.random_from_config": f"{HERE}::test_keys_that_change_which_jobs_run",
    "codecs.<name>.precision": f"{HERE}::test_codes_device_gpus_and_precision_leave_cpu_codes_as_they_are",
    "codes.device": f"{HERE}::test_codes_device_gpus_and_precision_leave_cpu_codes_as_they_are",
    "codes.gpus_per_job": f"{HERE}::test_codes_device_gpus_and_precision_leave_cpu_codes_as_they_are",
    "codes.batch_seconds": "test_codes.py::test_codes_do_not_depend_on_batching_ranks_or_shards_per_job",
    "codes.workers": "test_codes.py::test_codes_do_not_depend_on_batching_ranks_or_shards_per_job",
    "codes.shards_per_job": "test_codes.py::test_codes_do_not_depend_on_batching_ranks_or_shards_per_job",
    "shar.shards_per_job": "test_workflow.py::"
    "test_blocks_of_a_hundred_end_in_blocks_of_ten_then_one_job_for_the_rest",
    "buckets.num_buckets": "test_buckets.py::test_duration_bins_equal_lhotses_estimator_on_any_durations",
    "buckets.sub_buckets": "test_buckets.py::test_2d_bins_split_each_duration_bucket_by_tokens",
    "buckets.z_threshold": "test_buckets.py::test_outliers_are_dropped_above_a_z_score_of_4_by_default",
    "verify.workers": "test_verify.py::test_whole_dataset_verifies_the_same_with_any_worker_count",
    "publish.url": f"{HERE}::test_publish_keys_reach_the_publish_job_and_the_hand_off",
    "publish.part_mb": "test_storage.py::test_the_etag_of_a_file_is_known_before_it_is_uploaded",
    "publish.workers": "test_storage.py::test_the_etag_of_a_file_is_known_before_it_is_uploaded",
    "training.codec": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "training.path_prefix": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "plan.sample_records": "test_plan.py::test_snakemake_plan_calibrates_on_a_sample_and_plans_every_stage",
    "plan.sample_hours": "test_plan.py::test_long_recordings_are_sampled_whole_and_their_records_estimated",
    "plan.seed": "test_plan.py::test_the_sample_takes_whole_speakers_seeded_and_in_file_order",
    "plan.safety": "test_plan.py::test_shard_jobs_are_planned_per_shard_and_sized_per_kind",
    "training.shuffle": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "training.shard_seed": f"{HERE}::test_the_training_keys_are_written_into_input_cfg",
    "training.group_by": "test_training.py::"
    "test_nemo_samples_the_mix_input_cfg_writes_by_its_groups_and_temperature",
    "training.reweight_temperature": "test_training.py::"
    "test_nemo_samples_the_mix_input_cfg_writes_by_its_groups_and_temperature",
    "training.tokenizer": "test_catalog.py::test_tokens_are_counted_as_magpietts_counts_them",
    "training.tokenizer.<name>._target_": "test_catalog.py::test_the_tokenizer_target_sets_the_counts",
}


def keys_without_effect_tests(schema_path: Path, effects: dict[str, str]) -> list[str]:
    """Keys of the schema that no entry of `effects` names (the schema's order)."""
    return [path for path, _ in schema_keys(load_schema(schema_path)) if path not in effects]


def test_every_schema_key_has_an_effect_test():
    assert keys_without_effect_tests(SCHEMA, EFFECTS) == []
    keys = {path for path, _ in schema_keys(load_schema(SCHEMA))}
    assert set(EFFECTS) <= keys, f"no such key: {sorted(set(EFFECTS) - keys)}"


def test_a_new_key_without_a_test_fails_the_check(tmp_path):
    schema = yaml.safe_load(SCHEMA.read_text())
    schema["properties"]["prepare"]["properties"]["dummy"] = {
        "description": "x",
        "type": "integer",
        "default": 1,
    }
    copied = tmp_path / "schema.yaml"
    copied.write_text(yaml.safe_dump(schema))
    assert keys_without_effect_tests(copied, EFFECTS) == ["prepare.dummy"]


def test_every_named_test_exists():
    for key, where in EFFECTS.items():
        file, name = where.split("::")
        tree = ast.parse((REPO / "tests" / file).read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{key}: {where} does not exist"


# ---- datasets and prepare -----------------------------------------------------------------------


def prepare(tmp_path, lines, root, name="p", **settings):
    out = tmp_path / name
    manifest = write_jsonl(tmp_path / f"{name}.json", lines)
    prepare_dataset(
        str(manifest),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="d",
        audio_root=str(root),
        **settings,
    )
    rejected = {p.stem for p in (out / "rejected").iterdir()}
    return read_jsonl(out / "prepared.jsonl"), rejected


def test_manifest_and_audio_root_are_what_prepare_reads(tmp_path):
    write_tone(tmp_path / "a" / "x.wav", 1.0, 16000)
    write_tone(tmp_path / "b" / "x.wav", 1.0, 22050)  # the same name under another root
    line = {"audio_filepath": "x.wav", "duration": 1.0, "text": "hi", "speaker": "s"}
    under_a, _ = prepare(tmp_path, [line], tmp_path / "a", "a")
    under_b, _ = prepare(tmp_path, [line], tmp_path / "b", "b")
    assert under_a[0]["source_audio"]["sampling_rate"] == 16000
    assert under_b[0]["source_audio"]["sampling_rate"] == 22050
    other, _ = prepare(tmp_path, [{**line, "text": "another manifest"}], tmp_path / "a", "c")
    assert [r["text"] for r in other] == ["another manifest"]


def test_language_and_require_text_shape_the_prepared_records(tmp_path):
    write_tone(tmp_path / "x.wav", 1.0)
    lines = [{"audio_filepath": "x.wav", "duration": 1.0, "text": "", "speaker": "s"}]
    kept, rejected = prepare(tmp_path, lines, tmp_path, "default", max_rejected_fraction=1.0)
    assert (kept, rejected) == ([], {"empty_text"})
    kept, _ = prepare(tmp_path, lines, tmp_path, "audio_only", language="de", require_text=False)
    assert kept[0]["speaker"] == "| Language:de Dataset:d Speaker:s |"


# ---- which jobs run -----------------------------------------------------------------------------


def planned_jobs(tmp_path, config, *targets) -> dict[str, int]:
    """{rule: jobs} of a dry run of the real workflow."""
    cmd = snakemake_cmd(tmp_path / "work", config, *targets, "-n", "--quiet", "rules")
    done = run_command(cmd, timeout=300)
    table = done.stdout.split("Job stats:")[-1].split("Reasons")[0]
    rows = (line.split() for line in table.splitlines())
    return {r[0]: int(r[1]) for r in rows if len(r) == 2 and r[1].isdigit() and r[0] != "total"}


def test_keys_that_change_which_jobs_run(tmp_path):
    base = planned_jobs(tmp_path, demo_config())
    assert base["quality_part"] == 2 and "build_random_asr" not in base
    assert not {"identity_part", "identity_index", "identity_check", "identity_merge", "splits"} & set(base)
    off = planned_jobs(tmp_path, demo_config(quality={"enabled": False}))
    assert not {"quality_part", "quality_merge", "quality_filter"} & set(off)
    asr = demo_config(quality={"asr": {"random_from_config": str(REPO / "config/models/tiny_asr.yaml")}})
    assert planned_jobs(tmp_path, asr)["build_random_asr"] == 1

    spec = "results/models/tiny_nemo.json"
    built = planned_jobs(tmp_path, demo_config(), spec)
    assert built == {"build_random_codec": 1, "codec_model": 1}
    given = demo_config()
    given["codecs"]["tiny_nemo"] = {"backend": "nemo", "model": str(tmp_path / "codec.nemo")}
    (tmp_path / "codec.nemo").write_bytes(b"a model file")
    assert planned_jobs(tmp_path, given, spec) == {"codec_model": 1}


def test_identity_enabled_adds_the_identity_jobs_only_with_splits(tmp_path):
    """With splits, identity parts per dataset (written by the quality parts, from their one decode;
    with quality off, identity.parts jobs of their own), one index job over every dataset,
    identity.check_parts check jobs (the same links for any count: test_identity.py) and their
    merge; off, none, and the splits job reads no links (without splits:
    test_keys_that_change_which_jobs_run)."""
    identity = {"parts": 3, "check_parts": 3}
    on = planned_jobs(tmp_path, demo_config(degraded=True, splits=True, identity=identity))
    assert on["quality_part"] == 4 and "identity_part" not in on  # quality.parts: 2 a dataset
    assert on["identity_index"] == 1 and on["identity_check"] == 3
    assert on["identity_merge"] == 1 and on["splits"] == 2
    alone = demo_config(degraded=True, splits=True, identity=identity, quality={"enabled": False})
    assert planned_jobs(tmp_path, alone)["identity_part"] == 6
    off = planned_jobs(tmp_path, demo_config(degraded=True, splits=True, identity={"enabled": False}))
    assert not {"identity_part", "identity_index", "identity_check", "identity_merge"} & set(off)
    assert off["splits"] == 2


def test_identity_voice_keys_reach_the_identity_jobs(tmp_path):
    """identity.voices' embedder and options reach the identity parts (as VoiceEmbedding's fields,
    which choose the embedder: test_ge2e.py shows the level option's effect), its rules the identity
    job, and the parts' voices files its inputs only while voices are on."""
    from test_layout import parsed_rules

    voices = {"embedder_options": {"level": "raise"}, "min_similarity": 0.9, "deny": [["demo:a", "demo:b"]]}
    demo = SimpleNamespace(dataset="demo")
    rules = {r.name: r for r in parsed_rules(demo_config(splits=True, identity={"voices": voices}), tmp_path)}
    assert rules["quality_part"].params.identity(demo)["voices"] == {
        "embedder": "ge2e",
        "options": (("level", "raise"),),
    }
    job = rules["identity_index"].params
    assert job.voices["min_similarity"] == 0.9 and job.voices["deny"] == [["demo:a", "demo:b"]]
    assert all(len(part) == 3 for part in job.datasets(None)["demo"]["parts"])
    # the check parts read fingerprints only
    assert all(len(part) == 2 for part in rules["identity_check"].params.datasets(None)["demo"]["parts"])
    off = {
        r.name: r
        for r in parsed_rules(demo_config(splits=True, identity={"voices": {"enabled": False}}), tmp_path)
    }
    assert off["quality_part"].params.identity(demo)["voices"] is None
    assert all(len(part) == 2 for part in off["identity_index"].params.datasets(None)["demo"]["parts"])


def test_publish_keys_reach_the_publish_job_and_the_hand_off(tmp_path):
    """With publish.url the default target publishes (the publish job gets the block) and the hand-off
    files point at the URL unless training.path_prefix says otherwise; without it nothing publishes."""
    from test_layout import parsed_rules

    url = "s3://bucket/run"
    published = {r.name: r for r in parsed_rules(demo_config(publish={"url": url, "workers": 3}), tmp_path)}
    assert published["publish"].params.settings == {"url": url, "part_mb": 64, "workers": 3}
    assert published["all"].input.count(layout.PUBLISHED) == 1
    assert published["input_cfg"].params.path_prefix == url == published["evaluation_set"].params.path_prefix
    mounted = demo_config(publish={"url": url}, training={"path_prefix": "ais://bucket/run"})
    assert {r.name: r for r in parsed_rules(mounted, tmp_path)}[
        "input_cfg"
    ].params.path_prefix == "ais://bucket/run"
    local = {r.name: r for r in parsed_rules(demo_config(), tmp_path)}
    assert layout.PUBLISHED not in local["all"].input and local["input_cfg"].params.path_prefix is None


def test_text_keys_reach_the_text_jobs(tmp_path):
    """One text_normalizer job per language whatever the number of datasets, none where no record may
    need it; text.parts text jobs a dataset and one merge (the same bytes for any count:
    test_text.py); the text jobs and the normalizer's get text.cache_dir (as the parsed rules hold it)."""
    two = demo_config(degraded=True)  # two English datasets: one build
    jobs = planned_jobs(tmp_path, two)
    assert jobs["text_normalizer"] == 1 and jobs["text_part"] == 2 and jobs["text_merge"] == 2
    jobs = planned_jobs(tmp_path / "three", demo_config(degraded=True, text={"parts": 3}))
    assert jobs["text_part"] == 2 * 3 and jobs["text_merge"] == 2
    for policy in ("require_manifest", "text"):
        config = demo_config()
        config["datasets"]["demo"]["normalized_text"] = policy
        assert "text_normalizer" not in planned_jobs(tmp_path, config)
    from test_layout import parsed_rules

    rules = {r.name: r for r in parsed_rules(demo_config(text={"cache_dir": str(tmp_path / "c")}), tmp_path)}
    assert (
        rules["text_part"].params.cache_dir
        == rules["text_normalizer"].params.cache_dir
        == str(tmp_path / "c")
    )


# ---- quality and context ------------------------------------------------------------------------


def short_demo_records(tmp_path, n: int) -> Path:
    records = [r for r in read_jsonl(DEMO / "manifest.json") if "offset" not in r][:n]
    prepared, _ = prepare(tmp_path, records, DEMO / "audio", "demo")
    return write_jsonl(tmp_path / "prepared.jsonl", prepared)


def test_quality_device_leaves_the_metrics_as_they_are(tmp_path):
    """device auto and cpu measure the same here (no GPU); cpu makes the jobs quality_part_cpu, which
    ask for no GPU (tests/test_profiles.py: where the Slurm profile sends them)."""
    jobs = planned_jobs(tmp_path / "plan", demo_config(quality={"device": "cpu"}))
    assert jobs["quality_part_cpu"] == 2 and "quality_part" not in jobs
    prepared = short_demo_records(tmp_path, 2)
    out = {}
    for device in ("auto", "cpu"):
        run_quality_part(
            0,
            records=str(prepared),
            parts=1,
            out_metrics=str(tmp_path / f"{device}.jsonl"),
            out_stats=str(tmp_path / f"{device}.stats.json"),
            settings=MeasureSettings(str(DEMO / "audio"), 1),
            device=device,
        )
        out[device] = (tmp_path / f"{device}.jsonl").read_bytes()
    assert out["auto"] == out["cpu"] and len(set(out["cpu"].splitlines())) == 2


def test_context_device_leaves_the_choices_as_they_are(tmp_path):
    from testkit import prepare_demo, run_stage

    prep = prepare_demo(tmp_path)
    outs = [run_stage(tmp_path / device, prep, device=device)[0] for device in ("auto", "cpu")]
    auto, cpu = ((o / "with_context.jsonl").read_bytes() for o in outs)
    assert auto == cpu and len(auto.splitlines()) > 40


def test_cost_per_audio_second_moves_groups_between_parts(tmp_path):
    # speaker a: 9 short utterances (n² dominates); b and c: 3 long ones each (seconds dominate)
    lines = [{"speaker": "| Language:en Dataset:d Speaker:a |", "duration": 1.0}] * 9
    lines += [{"speaker": f"| Language:en Dataset:d Speaker:{s} |", "duration": 30.0} for s in "bbbccc"]
    prepared = write_jsonl(tmp_path / "prepared.jsonl", lines)
    plans = {
        alpha: plan_context(
            str(prepared),
            plan=str(tmp_path / f"{alpha}.json"),
            parts=2,
            grouping={"preset": "speaker"},
            cost_per_audio_second=alpha,
        )
        for alpha in (0.0, 1.0)
    }
    parts = {alpha: {k: g["part"] for k, g in p["groups"].items()} for alpha, p in plans.items()}
    assert parts[0.0] != parts[1.0]  # a alone on a part by n², then b and c split by their seconds
    assert plans[0.0]["part_costs"] == [81.0, 18.0] and plans[1.0]["part_costs"] == [189.0, 99.0]


# ---- shar ---------------------------------------------------------------------------------------


def test_shar_seed_orders_the_shards(tmp_path):
    lines = [{"audio_filepath": f"f{i}.wav", "offset": 0.0, "duration": 1.0} for i in range(40)]
    spans = write_jsonl(tmp_path / "with_context.jsonl", lines)
    orders = []
    for seed in (0, 1):
        plan_shards(
            str(spans),
            plan=str(tmp_path / f"{seed}.json"),
            inputs_dir=str(tmp_path / str(seed)),
            shard_size=10,
            seed=seed,
        )
        orders.append([line for _, line in planned_lines(tmp_path / str(seed))])
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])


def test_copy_through_off_encodes_every_span(tmp_path):
    path = write_tone(tmp_path / "x.flac", 1.0, 16000)
    on = copy_through(str(path), 0.0, 1.0, EncodeSettings(str(tmp_path)))
    assert on is not None and on.copied
    assert copy_through(str(path), 0.0, 1.0, EncodeSettings(str(tmp_path), copy_through=False)) is None


# ---- codes --------------------------------------------------------------------------------------


def test_codes_device_gpus_and_precision_leave_cpu_codes_as_they_are(demo_shards, tiny_nemo_codec, tmp_path):
    """On CPU: device auto and cpu, a GPU request outside Slurm, and bf16 all give the same codes
    (autocast is CUDA's alone; that bf16 reaches the codec is shown by its autocast)."""
    source = DatasetFiles(str(demo_shards[0]))
    out = {}
    for label, device, gpus, precision in (("a", "auto", 0, "fp32"), ("b", "cpu", 1, "bf16")):
        files = DatasetFiles(str(tmp_path / label))
        encode_shards(
            [ShardCodes(0, source.shard(0).target, source.shard(0).context, files.codes("tiny", 0))],
            codec=CodecSpec("tiny", "nemo", str(tiny_nemo_codec), precision),
            batch_seconds=8.0,
            device=device,
            gpus=gpus,
        )
        codes = files.codes("tiny", 0)
        out[label] = Path(codes.target).read_bytes() + Path(codes.context).read_bytes()
    assert out["a"] == out["b"]
    bf16 = cached_codec(CodecSpec("tiny", "nemo", str(tiny_nemo_codec), "bf16"), "cpu")
    assert bf16.precision == "bf16"  # it reaches the codec, whose autocast is a no-op on CPU
    with autocast(torch.device("cpu"), "bf16"):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


# ---- training hand-off --------------------------------------------------------------------------


def test_the_training_keys_are_written_into_input_cfg(tmp_path):
    (tmp_path / "plan.json").write_text(json.dumps({"num_shards": 2}))
    pq.write_table(pa.table({"duration": [1.0, 2.0, 3.0, 4.0]}), tmp_path / "catalog.parquet")

    def input_cfg(name, weight=None, tags=None, codec="a", prefix=None, settings=None):
        datasets = {
            "d": {
                "shar_dir": "results/d/shar",
                "plan": str(tmp_path / "plan.json"),
                "catalog": str(tmp_path / "catalog.parquet"),
                "weight": weight,
                "tags": tags or {},
            }
        }
        settings = settings or {"shuffle": True, "shard_seed": "randomized"}
        return write_input_cfg(
            datasets,
            str(tmp_path / f"{name}.yaml"),
            codec=codec,
            num_buckets=2,
            settings=settings,
            path_prefix=prefix,
        )

    default = input_cfg("default")
    (entry,) = default["input_cfg"]
    assert entry["weight"] == round(10.0 / 3600, 6) and entry["tags"] == {"dataset": "d"}
    assert entry["shar_path"]["target_codes"].startswith(str(Path("results/d/shar/codes_a").resolve()))
    (other,) = input_cfg("other", weight=2.0, tags={"lang": "en"}, codec="b", prefix="/cluster/data")[
        "input_cfg"
    ]
    assert other["weight"] == 2.0 and other["tags"] == {"dataset": "d", "lang": "en"}
    assert other["shar_path"]["target_codes"].startswith("/cluster/data/results/d/shar/codes_b/")
    settings = input_cfg("settings", settings={"shuffle": False, "shard_seed": 7})
    assert (default["shuffle"], default["shard_seed"]) == (True, "randomized")
    assert (settings["shuffle"], settings["shard_seed"]) == (False, 7)
