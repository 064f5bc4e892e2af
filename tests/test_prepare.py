import filecmp
import gzip
import json
import shutil

import pytest

from sharflow.core.errors import SharflowError
from sharflow.prepare.job import prepare_dataset
from sharflow.prepare.manifest import REASONS
from testkit import read_jsonl, write_jsonl, write_tone


def dirty_manifest(tmp_path):
    """A manifest with good records and at least one line for every reject reason."""
    root = tmp_path / "audio"
    write_tone(root / "a.wav", 2.0)
    write_tone(root / "b.flac", 3.0, 22050)
    write_tone(root / "long.wav", 8.0)
    write_tone(root / "empty.wav", 0.0)
    (root / "junk.wav").write_bytes(b"RIFF....garbage" * 20)
    ok = {"audio_filepath": "a.wav", "duration": 2.0, "text": "A sentence.", "speaker": "s1"}
    lines = [
        ok,
        {**ok, "audio_filepath": "b.flac", "duration": 3.0, "speaker": 12},
        {**ok, "audio_filepath": "long.wav", "offset": 0.0, "duration": 4.0},
        {**ok, "audio_filepath": "long.wav", "offset": 4.0, "duration": 4.0},
        "{broken json",
        "",
        '"a string"',
        {"audio_filepath": "a.wav", "text": "x", "speaker": "s1"},
        {**ok, "duration": "2"},
        {**ok, "duration": 0},
        {**ok, "text": ""},
        {**ok, "speaker": "has space"},
        {**ok, "audio_filepath": "../../etc/passwd"},
        {**ok, "audio_filepath": "nope.wav"},
        {**ok, "audio_filepath": "junk.wav"},
        {**ok, "audio_filepath": "empty.wav"},
        {**ok, "duration": 5.0},
        ok,  # duplicate of line 1
        {**ok, "audio_filepath": "long.wav", "offset": 4.0, "duration": 4.0},  # duplicate of line 4
    ]
    return write_jsonl(tmp_path / "manifest.json", lines), root


def run(tmp_path, manifest, root, name="out", **kw):
    out = tmp_path / name
    kw.setdefault("max_rejected_fraction", 1.0)
    stats = prepare_dataset(
        str(manifest),
        prepared=str(out / "prepared.jsonl"),
        rejected_dir=str(out / "rejected"),
        stats=str(out / "stats.json"),
        dataset="dirty",
        audio_root=str(root),
        **kw,
    )
    return out, stats


# the reasons of lhotse manifests and WebDataset tars: test_corpora feeds these
CONTAINER_ONLY = {
    "unsupported_cut",
    "unsupported_source",
    "missing_recording",
    "missing_metadata",
    "duplicate_key",
    "truncated_container",
}


def test_every_reason_and_nothing_lost(tmp_path):
    manifest, root = dirty_manifest(tmp_path)
    out, stats = run(tmp_path, manifest, root)
    n_lines = len(manifest.read_text().splitlines())
    assert stats["records_in"] == n_lines == 19
    assert stats["records_out"] == 4
    assert stats["records_in"] == stats["records_out"] + stats["rejected_total"]
    assert set(stats["rejected"]) == set(REASONS) - CONTAINER_ONLY, set(REASONS) - set(stats["rejected"])
    assert stats["rejected"]["duplicate"] == 2
    assert json.loads((out / "stats.json").read_text()) == stats

    # Every line number appears exactly once across prepared + rejected.
    prepared = read_jsonl(out / "prepared.jsonl")
    rejected = [r for f in sorted((out / "rejected").glob("*.jsonl")) for r in read_jsonl(f)]
    assert len(prepared) + len(rejected) == n_lines
    assert sorted(r["line"] for r in rejected) == sorted({r["line"] for r in rejected})
    original = manifest.read_text().splitlines()
    for r in rejected:
        assert r["original"] == original[r["line"] - 1]
        assert (out / "rejected" / f"{r['reason']}.jsonl").exists()
    dup = read_jsonl(out / "rejected" / "duplicate.jsonl")
    assert [d["line"] for d in dup] == [18, 19]
    assert "line 1" in dup[0]["detail"] and "line 4" in dup[1]["detail"]
    assert prepared[1]["speaker"] == "| Language:en Dataset:dirty Speaker:12 |"

    # hours in = every line's numeric duration, rejected or not; hours out = the prepared records'
    durations_in = []
    for line in original:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        value = record.get("duration") if isinstance(record, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            durations_in.append(value)
    assert stats["hours_in"] == round(sum(durations_in) / 3600, 6) > stats["hours_out"]
    assert stats["hours_out"] == round(sum(r["duration"] for r in prepared) / 3600, 6)


def test_serial_and_parallel_runs_are_byte_identical(tmp_path, monkeypatch):
    import sharflow.prepare.readers.nemo

    monkeypatch.setattr(sharflow.prepare.readers.nemo, "CHUNK_LINES", 3)  # many chunks in flight
    manifest, root = dirty_manifest(tmp_path)
    a, _ = run(tmp_path, manifest, root, "serial", workers=1)
    b, _ = run(tmp_path, manifest, root, "parallel", workers=2)
    for name in ["prepared.jsonl", "stats.json"]:
        assert (a / name).read_bytes() == (b / name).read_bytes()
    cmp = filecmp.dircmp(a / "rejected", b / "rejected")
    assert cmp.left_list == cmp.right_list and not cmp.diff_files
    assert (a / "rejected" / "duplicate.jsonl").read_bytes() == (
        b / "rejected" / "duplicate.jsonl"
    ).read_bytes()


def test_too_many_rejects_fail_with_a_message(tmp_path):
    manifest, root = dirty_manifest(tmp_path)
    with pytest.raises(SharflowError, match=r"rejected .*max_rejected_fraction"):
        run(tmp_path, manifest, root, max_rejected_fraction=0.5)


def test_missing_audio_root_is_a_config_error(tmp_path):
    manifest, _ = dirty_manifest(tmp_path)
    with pytest.raises(SharflowError, match="audio_root"):
        run(tmp_path, manifest, tmp_path / "nowhere")


def test_all_rejected_leaves_no_partial_outputs(tmp_path):
    manifest, root = dirty_manifest(tmp_path)
    with pytest.raises(SharflowError):
        run(tmp_path, manifest, root, max_rejected_fraction=0.0)
    out = tmp_path / "out"
    assert not out.exists() or list(out.iterdir()) == []


def test_speakers_naming_another_dataset_are_counted_and_warned_about(tmp_path, caplog):
    root = tmp_path / "audio"
    write_tone(root / "a.wav", 2.0)
    write_tone(root / "b.wav", 3.0)
    ok = {"audio_filepath": "a.wav", "duration": 2.0, "text": "A sentence."}
    manifest = write_jsonl(
        tmp_path / "m.json",
        [
            {**ok, "speaker": "| Language:en Dataset:dirty Speaker:s1 |"},  # names this dataset: fine
            {
                **ok,
                "audio_filepath": "b.wav",
                "duration": 3.0,
                "speaker": "| Language:en Dataset:LibriTTS Speaker:7 |",
            },
            {**ok, "offset": 0.5, "duration": 1.0, "speaker": "| Language:en Dataset:LibriTTS Speaker:8 |"},
            {**ok, "offset": 1.0, "duration": 1.0, "speaker": "| Language:en Dataset:HiFiTTS Speaker:9 |"},
            {**ok, "offset": 0.2, "duration": 1.0, "speaker": "s2"},  # a plain id gets this dataset's name
        ],
    )
    _, stats = run(tmp_path, manifest, root)
    assert stats["records_out"] == 5
    assert stats["speakers_naming_other_datasets"] == {"HiFiTTS": 1, "LibriTTS": 2}
    assert (
        "3 prepared record(s) have speakers naming another dataset (HiFiTTS: 1, LibriTTS: 2)" in caplog.text
    )
    assert "e.g. line 2: speaker '| Language:en Dataset:LibriTTS Speaker:7 |'" in caplog.text
    _, clean = run(
        tmp_path, write_jsonl(tmp_path / "clean.json", [{**ok, "speaker": "s1"}]), root, name="clean"
    )
    assert clean["speakers_naming_other_datasets"] == {}


def tabular_manifest(tmp_path):
    """Records a Parquet table can hold (one type per column), good ones and one per reason that
    does not need a malformed line; `cer` is present on some records only (null elsewhere)."""
    root = tmp_path / "audio"
    write_tone(root / "a.wav", 2.0)
    write_tone(root / "long.wav", 8.0)
    write_tone(root / "empty.wav", 0.0)
    (root / "junk.wav").write_bytes(b"RIFF....garbage" * 20)
    ok = {"audio_filepath": "a.wav", "duration": 2.0, "text": "Ünïcode text.", "speaker": "s1"}
    records = [
        {**ok, "cer": 0.25},
        {**ok, "audio_filepath": "long.wav", "offset": 0.0, "duration": 4.0, "speaker": "s2"},
        {**ok, "audio_filepath": "long.wav", "offset": 4.0, "duration": 4.0, "cer": 0.0},
        {k: v for k, v in ok.items() if k != "duration"},
        {**ok, "duration": 0.0},
        {**ok, "text": " "},
        {**ok, "speaker": "has space"},
        {**ok, "audio_filepath": "../../etc/passwd"},
        {**ok, "audio_filepath": "nope.wav"},
        {**ok, "audio_filepath": "junk.wav"},
        {**ok, "audio_filepath": "empty.wav"},
        {**ok, "duration": 5.0},
        ok,  # duplicate of the first
    ]
    return records, root


def test_gzip_and_parquet_manifests_prepare_like_json_lines(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import sharflow.prepare.readers.nemo

    monkeypatch.setattr(sharflow.prepare.readers.nemo, "CHUNK_LINES", 4)  # several batches per row group
    records, root = tabular_manifest(tmp_path)
    plain = write_jsonl(tmp_path / "m.json", records)
    with open(plain, "rb") as src, gzip.open(tmp_path / "m.jsonl.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    columns = list(dict.fromkeys(k for r in records for k in r))
    table = pa.table({c: [r.get(c) for r in records] for c in columns})
    pq.write_table(table, tmp_path / "m.parquet", row_group_size=5)
    assert pq.ParquetFile(tmp_path / "m.parquet").metadata.num_row_groups == 3

    outs = {}
    for name in ("m.json", "m.jsonl.gz", "m.parquet"):
        out, stats = run(tmp_path, tmp_path / name, root, name.replace(".", "_"))
        outs[name] = out, {k: v for k, v in stats.items() if k != "manifest"}
    (a, stats_a) = outs["m.json"]
    assert stats_a["records_out"] == 3 and stats_a["rejected_total"] == 10
    assert (
        set(stats_a["rejected"])
        == set(REASONS) - {"malformed_json", "not_an_object", "bad_type"} - CONTAINER_ONLY
    )
    assert read_jsonl(a / "prepared.jsonl")[0]["cer"] == 0.25
    assert "cer" not in read_jsonl(a / "prepared.jsonl")[1]
    for name in ("m.jsonl.gz", "m.parquet"):
        b, stats_b = outs[name]
        assert stats_b == stats_a, name
        assert (b / "prepared.jsonl").read_bytes() == (a / "prepared.jsonl").read_bytes(), name
        assert sorted(p.name for p in (b / "rejected").iterdir()) == sorted(
            p.name for p in (a / "rejected").iterdir()
        )
        for path in sorted((a / "rejected").glob("*.jsonl")):
            want, got = read_jsonl(path), read_jsonl(b / "rejected" / path.name)
            if name == "m.parquet":  # a Parquet reject names its 0-based row, as pandas' iloc
                assert [r["row"] + 1 for r in got] == [r["line"] for r in want]
                for r in got:
                    assert json.loads(r["original"]) == {
                        k: v for k, v in table.slice(r["row"], 1).to_pylist()[0].items() if v is not None
                    }
                got = [{k: v for k, v in r.items() if k != "row"} for r in got]
                want = [{k: v for k, v in r.items() if k != "line"} for r in want]
                for r in want:  # names the first copy by its line; the Parquet reject by its row
                    r["detail"] = r["detail"].replace("as line 1", "as row 0")
            assert [(r["reason"], r["detail"]) for r in got] == [(r["reason"], r["detail"]) for r in want]
    dup = read_jsonl(outs["m.parquet"][0] / "rejected" / "duplicate.jsonl")
    assert dup[0]["row"] == 12 and "row 0" in dup[0]["detail"]


def test_unreadable_manifests_are_named(tmp_path):
    _, root = tabular_manifest(tmp_path)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(SharflowError, match=r"bad\.parquet: not a readable Parquet file"):
        run(tmp_path, tmp_path / "bad.parquet", root)
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(SharflowError, match=r"bad\.jsonl\.gz: not readable as gzip"):
        run(tmp_path, tmp_path / "bad.jsonl.gz", root)
    with pytest.raises(SharflowError, match=r"manifest .*missing\.json.* is not a file"):
        run(tmp_path, tmp_path / "missing.json", root)


def test_max_rejected_fraction_at_the_value_and_one_ulp_below(tmp_path):
    import math

    manifest, root = dirty_manifest(tmp_path)
    exact = 15 / 19  # the dirty manifest: 15 of 19 lines rejected
    _, stats = run(tmp_path, manifest, root, "at", max_rejected_fraction=exact)
    assert stats["rejected_total"] == 15 and stats["records_in"] == 19
    _, _ = run(tmp_path, manifest, root, "above", max_rejected_fraction=math.nextafter(exact, 1))
    with pytest.raises(SharflowError, match="max_rejected_fraction"):
        run(tmp_path, manifest, root, "below", max_rejected_fraction=math.nextafter(exact, 0))
