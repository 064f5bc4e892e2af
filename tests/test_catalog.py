"""The dataset catalog: fragments from the shard jobs, the streaming merge, tokens, and the tables made
from it with pandas, each against an independent reading of the Shar cuts."""

import gzip
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sharflow.dataset.catalog
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.core.metrics import CATALOG_METRICS
from sharflow.core.shar_fields import open_cuts
from sharflow.dataset.buckets import bucket_bins, read_catalog_lengths, sampler_bin_2d_of
from sharflow.dataset.catalog import (
    BASE_COLUMNS,
    FRAGMENT_SCHEMA,
    CodecFrames,
    build_catalog,
    catalog_row,
    column_names,
    iter_batches,
    kept_optional_columns,
    merge_catalog,
    read_columns,
    write_fragment,
)
from sharflow.dataset.tables import (
    bucket_occupancy,
    dataset_card,
    dropped_text_warning,
    speaker_table,
    text_loss,
)
from sharflow.dataset.tokens import TokenCounter

CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.EnglishCharsTokenizer"
SPANISH = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.SpanishCharsTokenizer"


def shard_cuts(shards_dir, shard):
    path = DatasetFiles(str(shards_dir)).shard(shard).cuts
    with open_cuts(path) as f:
        return [json.loads(line) for line in f]


def all_cuts(shards_dir, num_shards=4):
    return [(s, i, c) for s in range(num_shards) for i, c in enumerate(shard_cuts(shards_dir, s))]


def test_fragments_hold_every_cut_in_order_with_its_own_values(demo_shards):
    shards_dir = demo_shards[0]
    files = DatasetFiles(str(shards_dir))
    for shard in range(4):
        table = pq.read_table(files.shard(shard).catalog)
        assert table.schema == FRAGMENT_SCHEMA
        rows = table.to_pylist()
        cuts = shard_cuts(shards_dir, shard)
        assert [r["cut_id"] for r in rows] == [c["id"] for c in cuts]
        for i, (row, cut) in enumerate(zip(rows, cuts, strict=True)):
            sup = cut["supervisions"][0]
            assert (row["shard"], row["position"]) == (shard, i)
            assert row["duration"] == cut["duration"] and row["offset"] == cut["start"]
            assert row["speaker"] == sup["speaker"] and row["language"] == sup["language"]
            assert row["text_chars"] == len(sup["text"])
            assert row["context_duration"] == sup["custom"]["context_audio_duration"]
            assert row["context_similarity"] == pytest.approx(
                sup["custom"]["context_speaker_similarity"], abs=1e-6
            )
            assert row["source_sample_rate"] == cut["recording"]["sampling_rate"]
    demo = pd.read_parquet(files.catalog)
    # the values vary: a column of constants would prove nothing
    assert (
        demo.duration.nunique() > 40
        and demo.speaker.nunique() >= 4
        and demo.context_similarity.nunique() > 40
    )


def test_merge_streams_row_groups_and_keeps_only_metrics_present(demo_shards, tmp_path, monkeypatch):
    files = DatasetFiles(str(demo_shards[0]))
    fragments = [files.shard(s).catalog for s in range(4)]
    # a second dataset whose shard 2 carries a cer on some rows and a validation_status
    with_metrics = []
    for s, path in enumerate(fragments):
        rows = pq.read_table(path).to_pylist()
        if s == 2:
            for i, row in enumerate(rows):
                row["cer"] = 0.01 * i if i % 2 else None
                row["validation_status"] = "pass" if i % 3 else "fail"
                row["asr_text"] = f"said {i}" if i % 4 == 0 else None
        with_metrics.append(str(tmp_path / f"f{s}.parquet"))
        write_fragment(rows, with_metrics[-1])
    monkeypatch.setattr(sharflow.dataset.catalog, "ROW_GROUP_ROWS", 20)  # a row group every two shards
    codecs = [CodecFrames("c22", 22050, 1024), CodecFrames("c16", 16000, 640)]
    merge_catalog(with_metrics, str(tmp_path / "m.parquet"), codecs=codecs)
    merge_catalog(fragments, str(tmp_path / "plain.parquet"), codecs=codecs)
    meta = pq.read_metadata(tmp_path / "m.parquet")
    assert meta.num_rows == 56 and meta.num_row_groups == 2
    table = pq.read_table(tmp_path / "m.parquet")
    assert table.schema.field("cer").type == pa.float32()
    assert table.schema.field("speaker").type == pa.dictionary(pa.int32(), pa.string())
    assert table.schema.field("frames_c22").type == pa.int32()
    assert "cer" not in pq.read_schema(tmp_path / "plain.parquet").names
    assert not set(CATALOG_METRICS[1:]) & set(table.schema.names)  # only cer was present
    assert not {"asr_text", "validation_status"} & set(pq.read_schema(tmp_path / "plain.parquet").names)
    df = table.to_pandas()
    assert df.asr_text.dropna().tolist() == ["said 0", "said 4", "said 8", "said 12"]
    assert df.cer.notna().sum() == 8 and df.validation_status.value_counts().to_dict() == {
        "pass": 10,
        "fail": 6,
    }
    # frames: ceil(samples at the codec's rate / samples_per_frame), by an independent formula
    seconds = df.num_samples / df.sample_rate
    assert (df.frames_c16 == np.ceil(np.round(seconds * 16000) / 640)).all()
    assert (df.frames_c22 == np.ceil(np.round(seconds * 22050) / 1024)).all()
    assert df.frames_c16.nunique() > 20
    again = tmp_path / "again.parquet"
    merge_catalog(with_metrics, str(again), codecs=codecs)
    assert again.read_bytes() == (tmp_path / "m.parquet").read_bytes()  # deterministic bytes


def test_tokens_are_counted_as_magpietts_counts_them(demo_shards, tmp_path):
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import (
        EnglishCharsTokenizer,
        SpanishCharsTokenizer,
    )

    shards_dir = demo_shards[0]
    files = DatasetFiles(str(shards_dir))
    out = {}
    for name, target in (("english", CHARS), ("spanish", SPANISH)):
        # these cuts name no tokenizer: MagpieTTS reads them with english_phoneme, whatever class that is
        build_catalog(
            "demo",
            fragments=[files.shard(s).catalog for s in range(4)],
            plan=files.shard_plan,
            codes_stats={},
            out=str(tmp_path / f"{name}.parquet"),
            tokenizer={"english_phoneme": {"_target_": target}},
        )
        out[name] = pd.read_parquet(tmp_path / f"{name}.parquet")
    cuts = [c for _, _, c in all_cuts(shards_dir)]
    texts = [
        c["supervisions"][0]["custom"].get("normalized_text", c["supervisions"][0]["text"]) for c in cuts
    ]
    # the independent reference: the tokenizer classes themselves, plus MagpieTTS's end-of-sequence token
    english, spanish = EnglishCharsTokenizer(), SpanishCharsTokenizer()
    assert out["english"].tokens.tolist() == [len(english.encode(t)) + 1 for t in texts]
    assert out["spanish"].tokens.tolist() == [len(spanish.encode(t)) + 1 for t in texts]
    assert out["english"].tokens.nunique() > 20
    # the 2D bins follow the tokens column
    _, lengths, counted = read_catalog_lengths(str(tmp_path / "english.parquet"))
    assert counted.startswith("tokens") and lengths.tolist() == out["english"].tokens.tolist()

    # a cut's own tokenizers, the longest reading of them (MagpieTTS picks one at random per step)
    counter = TokenCounter({"a": {"_target_": CHARS}, "b": {"_target_": SPANISH}})
    text = "¿Dónde está el niño?"
    a, b = len(english.encode(text)) + 1, len(spanish.encode(text)) + 1
    assert a != b and counter.count(text, ["b"]) == b and counter.count(text, ["a"]) == a
    assert counter.count(text, ["a", "b"]) == counter.count(text, ["b", "a"]) == max(a, b)
    with pytest.raises(SharflowError, match=r"cuts.x line 3 names tokenizers \['zz'\].*builds none"):
        counter.count(text, ["zz"], where="cuts.x line 3")


def test_speaker_table_and_bucket_occupancy_equal_a_direct_reading(demo_shards, monkeypatch):
    import sharflow.dataset.tables as tables

    catalog = DatasetFiles(str(demo_shards[0])).catalog
    cuts = all_cuts(demo_shards[0])
    by_speaker = {}
    for _, _, cut in cuts:
        sup = cut["supervisions"][0]
        entry = by_speaker.setdefault(sup["speaker"], [])
        entry.append((cut["duration"], sup["custom"]["context_speaker_similarity"]))
    whole = speaker_table(catalog)
    # in batches of 5 rows, their per-speaker parts folded whenever they pass 3 rows: the same table
    monkeypatch.setattr(
        tables, "iter_batches", lambda *a, **k: sharflow.dataset.catalog.iter_batches(*a, batch_rows=5, **k)
    )
    monkeypatch.setattr(tables, "FOLD_ROWS", 3)
    folded = speaker_table(catalog)
    pd.testing.assert_frame_equal(folded, whole, check_exact=False, rtol=1e-12)
    table = whole.set_index("speaker")
    assert sorted(table.index) == sorted(by_speaker) and len(by_speaker) > 3
    for speaker, values in by_speaker.items():
        d, sim = np.array(values).T
        row = table.loc[speaker]
        assert row.utterances == len(d)
        assert row.hours == pytest.approx(d.sum() / 3600)
        assert row.mean_context_similarity == pytest.approx(sim.mean(), abs=1e-6)
        assert row.min_context_similarity == pytest.approx(sim.min(), abs=1e-6)
    assert list(table.hours) == sorted(table.hours, reverse=True)

    durations, lengths, _ = read_catalog_lengths(catalog)
    buckets = bucket_bins(durations, lengths, num_buckets=5, sub_buckets=3)
    one, two = bucket_occupancy(catalog, buckets)
    assert one.cuts.sum() == two.cuts.sum() == 56 and one.hours.sum() == pytest.approx(durations.sum() / 3600)
    assert (one.cuts > 0).sum() >= 4
    from nemo.collections.common.data.lhotse.sampling import find_smallest_bucket

    bins = np.asarray(buckets["bucket_duration_bins_2d"])
    expected = [
        find_smallest_bucket(bins, (d, t), strict=True, max_ratio=buckets["max_tps"])
        for d, t in zip(durations, lengths, strict=True)
    ]
    got = sampler_bin_2d_of(durations, lengths, buckets["bucket_duration_bins_2d"], buckets["max_tps"])
    assert got.tolist() == [-1 if e is None else e for e in expected]
    assert len(set(got.tolist())) > 5


def test_dataset_card_states_the_dataset(demo_shards):
    catalog = DatasetFiles(str(demo_shards[0])).catalog
    durations, lengths, _ = read_catalog_lengths(catalog)
    buckets = bucket_bins(durations, lengths, num_buckets=5)
    card = dataset_card("demo", catalog, buckets, {"shards": 4, "fields": ["cuts", "target_audio"]})
    assert card.startswith("# demo\n")
    assert f"**56 utterances, {durations.sum() / 3600:.3f} hours** in 4 shards" in card
    assert f"| duration (s) | {durations.min():.3f} |" in card
    assert f"{np.median(durations):.3f}" in card
    assert "- **languages** (hours): en" in card


def test_the_card_and_the_end_of_the_run_say_which_train_cuts_lose_characters(tmp_path):
    """From the catalog's tokenizer_dropped_chars (train rows; null: not measured) and the text stats."""
    drops = [0, 2, None, 0, 1, None, 0]
    path = tmp_path / "c.parquet"
    write_fragment(synthetic_rows(0, 7, tokenizer_dropped_chars=lambda i: drops[i]), str(path))
    assert text_loss(str(path)) == {"cuts": 7, "dropping": 2, "unmeasured": 2}
    clean = tmp_path / "clean.parquet"
    write_fragment(synthetic_rows(0, 3, tokenizer_dropped_chars=lambda i: 0), str(clean))
    warning = dropped_text_warning({"b": str(path), "a": str(clean)})
    assert warning.startswith(
        "not measured: 2 train cuts; of the others, 2 train cuts lose characters to their tokenizers "
        "(b: 2 of 7)"
    )
    assert "tokenizer_dropped_chars: {max: 0}" in warning
    assert dropped_text_warning({"a": str(clean)}) is None
    text = {
        "normalized_text_source": {"manifest": 3, "renormalized": 4},
        "symbols_left": 1,
        "symbols_left_by_source": {"normalizer": 1},
        "coverage": {"measured": 5, "unmeasured": 2, "records_dropping": 2, "symbols_dropped": 3},
        "dropped_symbols": {"€": 2, "≤": 1},
        "unmeasured_tokenizers": {"english_phoneme": {"records": 2, "why": "a phoneme tokenizer; set it"}},
    }
    card = dataset_card(
        "d",
        str(path),
        {"num_buckets": 2, "bucket_duration_bins": [2.0]},
        {"shards": 1, "fields": ["cuts"]},
        text=text,
    )
    section = card.split("## Text the model reads")[1].split("##")[0]
    # the cuts not measured first: no figure of loss over them
    assert "**not measured: 2 of 7 train cuts; 2 of 5 measured train cuts lose characters" in section
    unmeasured = tmp_path / "unmeasured.parquet"  # a catalog without the column: none measured
    write_fragment(synthetic_rows(0, 4), str(unmeasured))
    assert text_loss(str(unmeasured)) == {"cuts": 4, "dropping": 0, "unmeasured": 4}
    none = dataset_card("d", str(unmeasured), {"num_buckets": 2, "bucket_duration_bins": [2.0]},
                        {"shards": 1, "fields": ["cuts"]}, text=text)  # fmt: skip
    assert "- **not measured: 4 of 4 train cuts; 0 of 0 measured train cuts" in none
    assert "- 4 spoken forms of the manifest held digits or symbols and were normalized again" in section
    assert "- 1 spoken forms keep digits or symbols (normalizer 1)" in section
    assert (
        "most often '€' '≤'" in section
        and "2 records not measured with english_phoneme: a phoneme" in section
    )


def test_a_row_takes_the_quality_fields_of_its_record():
    record = {
        "audio_filepath": "a.wav",
        "offset": 0.5,
        "duration": 2.0,
        "text": "Hi, you.",
        "normalized_text": "hi you",
        "source_audio": {"sampling_rate": 16000},
        "context_audio_filepath": "b.wav",
        "context_audio_offset": 0.0,
        "context_audio_duration": 3.0,
        "context_speaker_similarity": 0.75,
        "cer": 0.25,
        "dnsmos_ovrl": 3.5,
        "loudness_lufs": None,
        "asr_text": "hi ewe",
        "validation_status": "fail",
        "speaker": "s",
    }
    row = catalog_row(
        record, cut_id="c", shard=1, position=2, language="en", target=(22050, 44100), context=(22050, 66150)
    )
    assert (row["cer"], row["dnsmos_ovrl"], row["loudness_lufs"], row["wer"]) == (0.25, 3.5, None, None)
    assert (row["asr_text"], row["validation_status"], row["context_similarity"]) == ("hi ewe", "fail", 0.75)
    assert (row["text_chars"], row["normalized_text_chars"], row["num_samples"]) == (8, 6, 44100)
    odd = catalog_row(
        {**record, "asr_text": 5, "validation_status": 5, "cer": float("nan"), "wer": True},
        cut_id="c",
        shard=1,
        position=2,
        language="en",
        target=(22050, 44100),
        context=(22050, 66150),
    )
    assert (odd["asr_text"], odd["validation_status"], odd["cer"], odd["wer"]) == (None, None, None, None)


def test_the_tokenizer_target_sets_the_counts():
    """training.tokenizer.<name>._target_: another tokenizer class counts the same text differently."""
    from sharflow.dataset.tokens import TokenCounter

    text = "¿Qué año? Ñandú, señor."
    english = TokenCounter({"english_phoneme": {"_target_": CHARS}}).count(text, ["english_phoneme"])
    spanish = TokenCounter({"english_phoneme": {"_target_": SPANISH}}).count(text, ["english_phoneme"])
    assert english != spanish


def synthetic_rows(shard: int, n: int, **extra) -> list[dict]:
    """Catalog rows as a shard job builds them (catalog_row), with varied values; `extra` per row i:
    {column: function of i}."""
    rows = []
    for i in range(n):
        record = {
            "audio_filepath": f"spk{i % 3}/u{shard}_{i}.flac",
            "offset": 0.25 * i,
            "duration": 1.0 + 0.37 * i + shard,
            "text": "x" * (5 + i),
            "speaker": f"| Language:en Dataset:d Speaker:{i % 3} |",
            "source_audio": {"sampling_rate": 16000 if i % 2 else 22050},
            "context_audio_filepath": f"spk{i % 3}/c{i}.flac",
            "context_audio_offset": 0.0,
            "context_audio_duration": 3.0 + 0.1 * i,
            "context_speaker_similarity": 0.6 + 0.01 * i,
            **{k: f(i) for k, f in extra.items()},
        }
        samples = round(record["duration"] * 22050)
        rows.append(
            catalog_row(
                record,
                cut_id=f"c{shard}-{i}",
                shard=shard,
                position=i,
                language="en",
                target=(22050, samples),
                context=(16000, round(record["context_audio_duration"] * 16000)),
            )
        )
    return rows


def nulls_as_none(column: pd.Series) -> list:
    return [None if pd.isna(v) else v for v in column]


def test_merge_of_synthetic_fragments_keeps_metrics_present_adds_frames_and_tokens(
    tmp_path, monkeypatch, caplog
):
    """The streaming merge on fragments built in the test (fast: also the mutation run's check)."""
    plain = [synthetic_rows(0, 5), synthetic_rows(1, 4)]
    marked = [
        synthetic_rows(0, 5),
        synthetic_rows(
            1,
            4,
            cer=lambda i: 0.1 * i if i % 2 else None,
            validation_status=lambda i: "fail" if i == 3 else "pass",
            asr_text=lambda i: "hi" if i == 0 else None,
        ),
    ]
    paths = {}
    for name, fragments in (("plain", plain), ("marked", marked)):
        paths[name] = [str(tmp_path / f"{name}{s}.parquet") for s in range(2)]
        for rows, path in zip(fragments, paths[name], strict=True):
            write_fragment(rows, path)
    monkeypatch.setattr(sharflow.dataset.catalog, "ROW_GROUP_ROWS", 5)  # a row group per shard
    codecs = [CodecFrames("c", 16000, 640)]
    summary = merge_catalog(
        paths["marked"],
        str(tmp_path / "m.parquet"),
        codecs=codecs,
        token_counts=lambda shard: [10 * shard + i for i in range((5, 4)[shard])],
    )
    merge_catalog(paths["plain"], str(tmp_path / "p.parquet"), codecs=[])
    assert summary["rows"] == 9 and pq.read_metadata(tmp_path / "m.parquet").num_row_groups == 2
    m, p = pd.read_parquet(tmp_path / "m.parquet"), pd.read_parquet(tmp_path / "p.parquet")
    assert list(p.columns) == [name for name, _ in BASE_COLUMNS]  # nothing optional: no metric, no frames
    extra = [c for c in m.columns if c not in p.columns]
    assert extra == ["cer", "validation_status", "asr_text", "tokens", "frames_c", "context_frames_c"]
    assert m.cer.isna().tolist() == [True] * 5 + [True, False, True, False]
    assert m.cer.dropna().astype(float).round(6).tolist() == [0.1, 0.3]  # float32 column
    assert nulls_as_none(m.validation_status) == [None] * 5 + ["pass", "pass", "pass", "fail"]
    assert nulls_as_none(m.asr_text) == [None] * 5 + ["hi", None, None, None]
    assert m.tokens.tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 13]
    expected = np.ceil(np.round(m.num_samples / 22050 * 16000) / 640).astype(int)
    assert m.frames_c.tolist() == expected.tolist() and m.frames_c.nunique() > 5
    assert m.context_frames_c.tolist() == np.ceil(m.context_num_samples / 640).astype(int).tolist()
    assert m.speaker.nunique() == 3 and m.shard.tolist() == [0] * 5 + [1] * 4
    # row groups of about ROW_GROUP_ROWS: a group closes once 4 rows are pending, and counts afresh
    monkeypatch.setattr(sharflow.dataset.catalog, "ROW_GROUP_ROWS", 4)
    small = [str(tmp_path / f"small{s}.parquet") for s in range(4)]
    for s, (path, n) in enumerate(zip(small, (2, 2, 3, 1), strict=True)):
        write_fragment(synthetic_rows(s, n), path)
    caplog.set_level(logging.INFO, logger="sharflow")
    merge_catalog(small, str(tmp_path / "s.parquet"), codecs=[])
    meta = pq.read_metadata(tmp_path / "s.parquet")
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [4, 4]
    assert f"catalog {tmp_path / 's.parquet'}: 8 rows, 19 columns (cut_id, shard, position," in caplog.text
    # a column found in one fragment is kept whatever the fragments after it hold
    assert kept_optional_columns(list(reversed(paths["marked"]))) == ["cer", "validation_status", "asr_text"]
    with pytest.raises(ValueError, match="shard 1: 3 token counts for 4 rows"):
        merge_catalog(
            paths["plain"],
            str(tmp_path / "x.parquet"),
            codecs=[],
            token_counts=lambda shard: [0] * (5 if shard == 0 else 3),
        )


def test_columns_with_values_read_the_column_when_a_fragment_has_no_statistics(tmp_path):
    rows = synthetic_rows(0, 3, cer=lambda i: 0.5 if i == 2 else None)
    table = pa.Table.from_pylist(rows, schema=FRAGMENT_SCHEMA)
    pq.write_table(table, tmp_path / "no_stats.parquet", write_statistics=False)
    pq.write_table(table, tmp_path / "stats.parquet")
    for name in ("no_stats", "stats"):
        found = sharflow.dataset.catalog._columns_with_values(
            str(tmp_path / f"{name}.parquet"), ("cer", "wer")
        )
        assert found == {"cer"}, name


def test_a_row_holds_every_field_of_its_cut():
    record = {
        "audio_filepath": "spk/a.wav",
        "offset": 0.5,
        "duration": 2.0,
        "text": "Hi, you.",
        "speaker": "| Language:de Dataset:d Speaker:s |",
        "source_audio": {"sampling_rate": 44100},
        "context_audio_filepath": "spk/b.wav",
        "context_audio_offset": 1.25,
        "context_audio_duration": 3.0,
        "context_speaker_similarity": 0.75,
        "context_speaker_embedder": "ge2e",
    }
    row = catalog_row(
        record, cut_id="c", shard=1, position=2, language="de", target=(22050, 44100), context=(16000, 48000)
    )
    assert row == {
        "cut_id": "c",
        "shard": 1,
        "position": 2,
        "speaker": "| Language:de Dataset:d Speaker:s |",
        "language": "de",
        "source_file": "spk/a.wav",
        "offset": 0.5,
        "duration": 2.0,
        "source_sample_rate": 44100,
        "sample_rate": 22050,
        "num_samples": 44100,
        "text_chars": 8,
        "normalized_text_chars": None,
        "context_file": "spk/b.wav",
        "context_offset": 1.25,
        "context_duration": 3.0,
        "context_sample_rate": 16000,
        "context_num_samples": 48000,
        "context_similarity": 0.75,
        "context_embedder": "ge2e",
        **dict.fromkeys(CATALOG_METRICS),
        "validation_status": None,
        "asr_text": None,
        "tokenizer_names": None,
        "normalized_text_source": None,
        "fingerprint_hashes": None,
        "audio_digest": None,
        "duplicate_of": None,
    }
    assert list(row) == FRAGMENT_SCHEMA.names  # the fragment's column order
    # the text stage's fields: the cut's tokenizers (comma-separated) and where normalized_text came from
    texted = {
        **record,
        "tokenizer_names": ["german_chars", "german_phoneme"],
        "normalized_text_source": "manifest",
    }
    row = catalog_row(
        texted, cut_id="c", shard=1, position=2, language="de", target=(22050, 44100), context=(16000, 48000)
    )
    assert (row["tokenizer_names"], row["normalized_text_source"]) == (
        "german_chars,german_phoneme",
        "manifest",
    )
    # the identity stage's fields (with splits): its fingerprint's size, its samples' digest, a mark
    identified = {
        **record,
        "fingerprint_hashes": 312,
        "audio_digest": "00ff00ff00ff00ff",
        "duplicate_of": "d:a@0",
    }
    row = catalog_row(
        identified,
        cut_id="c",
        shard=1,
        position=2,
        language="de",
        target=(22050, 44100),
        context=(16000, 48000),
    )
    assert (row["fingerprint_hashes"], row["audio_digest"], row["duplicate_of"]) == (
        312,
        "00ff00ff00ff00ff",
        "d:a@0",
    )


def test_build_catalog_takes_each_codecs_frames_from_its_codes_stats(tmp_path):
    files = DatasetFiles(str(tmp_path / "ds"))
    for shard, n in ((0, 3), (1, 2)):
        write_fragment(synthetic_rows(shard, n), files.shard(shard).catalog)
    stats = {}
    for name, rate, spf in (("zeta", 24000, 960), ("alpha", 22050, 1024)):
        stats[name] = str(tmp_path / f"{name}.json")
        (tmp_path / f"{name}.json").write_text(json.dumps({"sample_rate": rate, "samples_per_frame": spf}))
    summary = build_catalog(
        "ds",
        fragments=[files.shard(0).catalog, files.shard(1).catalog],
        plan="unused",
        codes_stats=stats,
        out=files.catalog,
    )
    assert summary["rows"] == 5
    assert summary["columns"][-4:] == [
        "frames_alpha",
        "context_frames_alpha",
        "frames_zeta",
        "context_frames_zeta",
    ]
    table = pd.read_parquet(files.catalog)
    seconds = table.num_samples / table.sample_rate
    assert table.frames_zeta.tolist() == np.ceil(np.round(seconds * 24000) / 960).astype(int).tolist()
    assert table.frames_alpha.tolist() == np.ceil(np.round(seconds * 22050) / 1024).astype(int).tolist()
    assert table.frames_zeta.tolist() != table.frames_alpha.tolist()


def test_build_catalog_counts_tokens_from_the_shards_cuts(tmp_path, caplog):
    """With training.tokenizer, the tokens of each cut's normalized_text (else text) from the cuts files
    the plan names, as MagpieTTS counts them."""
    from nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers import EnglishCharsTokenizer

    files = DatasetFiles(str(tmp_path / "ds"))
    texts = [["Hello there.", "A much longer sentence, with commas."], ["Two words", "x"]]
    Path(files.shard_plan).parent.mkdir(parents=True)
    Path(files.shard_plan).write_text(json.dumps({"num_shards": 2}))  # an unindexed set: gzipped cuts
    files = DatasetFiles(files.root, indexed=False)
    for shard, shard_texts in enumerate(texts):
        write_fragment(synthetic_rows(shard, len(shard_texts)), files.shard(shard).catalog)
        Path(files.shard(shard).cuts).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(files.shard(shard).cuts, "wt", encoding="utf-8") as f:
            for i, text in enumerate(shard_texts):
                custom = {"normalized_text": text.upper()} if i == 1 else {}
                f.write(json.dumps({"supervisions": [{"text": text, "custom": custom}]}) + "\n")
    caplog.set_level(logging.INFO, logger="sharflow")
    build_catalog(
        "ds",
        fragments=[files.shard(s).catalog for s in range(2)],
        plan=files.shard_plan,
        codes_stats={},
        out=files.catalog,
        tokenizer={"english_phoneme": {"_target_": CHARS}},
    )
    english = EnglishCharsTokenizer()
    spoken = [text.upper() if i == 1 else text for shard_texts in texts for i, text in enumerate(shard_texts)]
    assert pd.read_parquet(files.catalog).tokens.tolist() == [len(english.encode(t)) + 1 for t in spoken]
    assert "catalog ds: 4 cuts" in caplog.text


def test_catalog_readers_give_columns_batches_and_names(tmp_path):
    path = tmp_path / "c.parquet"
    write_fragment(synthetic_rows(0, 7), str(path))
    assert column_names(str(path)) == FRAGMENT_SCHEMA.names
    columns = read_columns(str(path), ["duration", "shard"])
    assert list(columns) == ["duration", "shard"] and columns["duration"].tolist() == [
        1.0 + 0.37 * i for i in range(7)
    ]
    batches = list(iter_batches(str(path), ["cut_id", "position"], batch_rows=3))
    assert [b.num_rows for b in batches] == [3, 3, 1] and batches[0].schema.names == ["cut_id", "position"]
    assert [p for b in batches for p in b.column(1).to_pylist()] == list(range(7))


def test_held_out_splits_follow_train_in_one_catalog_and_readers_take_train_unless_asked(tmp_path):
    """build_catalog with held-out Shar sets: their rows after the dataset's own, a `split` column
    after cut_id, shard, position; iter_batches and read_columns give train by default, a split when
    asked, every row with None; a catalog without the column is all train."""
    files = DatasetFiles(str(tmp_path / "ds"))
    write_fragment(synthetic_rows(0, 3), files.shard(0).catalog)
    (tmp_path / "ds" / "shard_plan.json").write_text(json.dumps({"num_shards": 1, "indexed": True}))
    held = {}
    for split, n in (("dev_seen", 2), ("test_unseen", 4)):
        sub = DatasetFiles(str(tmp_path / "ds" / split))
        rows = synthetic_rows(0, n)
        for row in rows:
            row["cut_id"] = f"{split}-{row['cut_id']}"
        write_fragment(rows, sub.shard(0).catalog)
        for path in sub.shard(0).named().values():  # the shard's other files, as its job left them
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).touch()
        Path(sub.shard_plan).write_text(json.dumps({"num_shards": 1, "indexed": True}))
        held[split] = sub.shard_plan
    summary = build_catalog(
        "ds",
        fragments=[files.shard(0).catalog],
        plan=files.shard_plan,
        codes_stats={},
        out=files.catalog,
        held_out=list(held.items()),
    )
    assert summary["rows"] == 9 and summary["columns"][:4] == ["cut_id", "shard", "position", "split"]
    table = pd.read_parquet(files.catalog)
    assert table.split.astype(str).tolist() == ["train"] * 3 + ["dev_seen"] * 2 + ["test_unseen"] * 4
    assert table.position.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    durations = table.duration.to_numpy()
    assert np.array_equal(read_columns(files.catalog, ["duration"])["duration"], durations[:3])
    assert np.array_equal(
        read_columns(files.catalog, ["duration"], split="test_unseen")["duration"], durations[5:]
    )
    assert np.array_equal(read_columns(files.catalog, ["duration"], split=None)["duration"], durations)
    assert len(read_columns(files.catalog, ["duration"], split="dev_unseen")["duration"]) == 0
    batches = list(iter_batches(files.catalog, ["cut_id"], batch_rows=2, split="dev_seen"))
    assert [c for b in batches for c in b.column("cut_id").to_pylist()] == table.cut_id[3:5].tolist()
    assert all(b.schema.names == ["cut_id"] for b in batches)
    # a catalog without splits is all train
    plain = str(tmp_path / "plain.parquet")
    merge_catalog([files.shard(0).catalog], plain, codecs=[])
    assert len(read_columns(plain, ["duration"])["duration"]) == 3
    assert len(read_columns(plain, ["duration"], split="dev_seen")["duration"]) == 0
    assert "split" not in column_names(plain)


def test_the_card_says_what_measured_the_similarities_and_what_neMos_0_6_would_drop(tmp_path):
    """similarity_section over a catalog: the embedders its cuts name, and the cuts and hours a filter
    at NeMo's documented 0.6 would drop, counted from the similarities (varied: the count can fail)."""
    from sharflow.dataset.tables import similarity_section

    def section(labels, path):
        rows = synthetic_rows(
            0,
            12,
            context_speaker_similarity=lambda i: 0.33 + 0.05 * i,
            context_speaker_embedder=lambda i: labels[i % len(labels)],
        )
        write_fragment(rows, str(path))
        return "\n".join(similarity_section(str(path)))

    ge2e = section(["ge2e"], tmp_path / "ge2e.parquet")
    sims = 0.33 + 0.05 * np.arange(12)  # none on a threshold
    below = sims < 0.6
    hours = (1.0 + 0.37 * np.arange(12))[below].sum() / 3600
    assert below.sum() == 6 and "Measured by `ge2e` on 12 cuts" in ge2e
    assert f"would drop **6 of 12 cuts ({hours:.3f} h, 50.0 %)** here" in ge2e
    assert "not on TitaNet's scale" in ge2e and "| | 4 | 6 | 8 | 10 | 12 |" in ge2e
    titanet = section(["nemo:titanet_large"], tmp_path / "titanet.parquet")
    assert "Measured by `nemo:titanet_large`" in titanet and "on TitaNet's own scale." in titanet
    mixed = section(["ge2e", "nemo:titanet_large"], tmp_path / "mixed.parquet")
    assert "Measured by `ge2e`, `nemo:titanet_large`" in mixed and "not on TitaNet's scale" in mixed
    assert pd.read_parquet(tmp_path / "mixed.parquet").context_embedder.tolist()[:2] == [
        "ge2e",
        "nemo:titanet_large",
    ]
