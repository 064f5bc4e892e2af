"""Corpora as they ship (issue 47): lhotse manifests and recipes read by prepare, no conversion script.

A lhotse corpus must prepare to exactly the records its NeMo manifest prepares to (every later stage
reads only the prepared records, so the same records make the same Shar); what only a lhotse manifest
can get wrong is a reject with its reason, naming the supervision; a recipe runs by name in the real
workflow over a corpus folder in that recipe's layout.
"""

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

from sharflow.core.config import validate_config
from sharflow.core.errors import SharflowError
from sharflow.io import containers, storage
from sharflow.io.audio import probe_audio, read_span, resolve_audio_path
from sharflow.prepare.readers.lhotse import LhotseManifest, supervision_record
from sharflow.prepare.recipe import run_recipe
from sharflow.shar.audio import EncodeSettings, copy_through
from sharflow.shar.plan import recording_id
from testkit import (
    DEMO,
    FIELDS,
    LONG_RUN,
    REPO,
    data_files,
    demo_config,
    identity_part,
    magpie_dataset,
    prepare_demo,
    read_jsonl,
    run_snakemake,
    write_jsonl,
    write_tone,
)

SCHEMA = REPO / "config" / "schema.yaml"


def _prepare(tmp: Path, manifest, root=DEMO / "audio", **settings) -> tuple[list[str], dict, Path]:
    """(prepared lines, stats, rejects folder) of prepare_demo."""
    out = prepare_demo(tmp, manifest, root, **settings)
    stats = json.loads((out / "stats.json").read_text())
    return (out / "prepared.jsonl").read_text().splitlines(), stats, out / "rejected"


def _demo_as_lhotse(folder: Path) -> tuple[Path, Path, list[dict]]:
    """The demo corpus as lhotse manifests, written by lhotse: one recording per file (read by lhotse
    from the file; the demo's chapter file holds several segments), one supervision per NeMo record."""
    records = read_jsonl(DEMO / "manifest.json")
    files = dict.fromkeys(r["audio_filepath"] for r in records)
    recordings = RecordingSet.from_recordings(
        Recording.from_file(DEMO / "audio" / f, recording_id=f) for f in files
    )
    supervisions = SupervisionSet.from_segments(
        SupervisionSegment(
            id=f"sup-{i}",
            recording_id=r["audio_filepath"],
            start=r.get("offset", 0.0),
            duration=r["duration"],
            text=r["text"],
            speaker=r["speaker"],
            custom={
                k: v
                for k, v in r.items()
                if k not in ("audio_filepath", "offset", "duration", "text", "speaker")
            }
            or None,
        )
        for i, r in enumerate(records)
    )
    folder.mkdir(parents=True, exist_ok=True)
    recordings.to_file(folder / "recordings.jsonl.gz")
    supervisions.to_file(folder / "supervisions.jsonl.gz")
    return folder / "recordings.jsonl.gz", folder / "supervisions.jsonl.gz", records


def test_lhotse_supervisions_and_cuts_prepare_to_the_nemo_manifests_records(tmp_path):
    nemo = (prepare_demo(tmp_path / "nemo") / "prepared.jsonl").read_text().splitlines()
    # what is compared carries information: every demo record, distinct texts, speakers and files
    assert len(nemo) == len(read_jsonl(DEMO / "manifest.json")) > 20
    assert len({json.loads(x)["text"] for x in nemo}) == len(nemo)
    assert len({json.loads(x)["speaker"] for x in nemo}) >= 5
    assert len({json.loads(x)["offset"] for x in nemo}) > 1  # segments of one file among whole files
    recordings, supervisions, _ = _demo_as_lhotse(tmp_path / "lhotse")

    lines, stats, _ = _prepare(tmp_path / "sups", supervisions, form="lhotse", recordings=str(recordings))
    assert lines == nemo
    assert stats["records_in"] == stats["records_out"] == len(nemo)

    cuts = CutSet.from_manifests(
        recordings=RecordingSet.from_file(recordings), supervisions=SupervisionSet.from_file(supervisions)
    )
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    lines, stats, _ = _prepare(tmp_path / "cuts", tmp_path / "cuts.jsonl.gz", form="lhotse")
    assert lines == nemo
    assert stats["records_in"] == stats["records_out"] == len(nemo)


def test_a_recording_with_several_supervisions_gives_one_record_each_with_its_offset(tmp_path):
    path = DEMO / "audio" / "awb" / "awb_000.flac"
    recording = Recording.from_file(path, recording_id="awb_000")
    sups = [
        SupervisionSegment("a", "awb_000", 0.0, 2.0, text="The birch canoe", speaker="awb", language="en"),
        SupervisionSegment(
            "b", "awb_000", 2.5, 1.5, text="slid on the planks", speaker="awb", custom={"emotion": "calm"}
        ),
    ]
    cut = CutSet.from_manifests(RecordingSet.from_recordings([recording]), SupervisionSet.from_segments(sups))
    cut.to_file(tmp_path / "cuts.jsonl.gz")
    lines, stats, _ = _prepare(tmp_path, tmp_path / "cuts.jsonl.gz", form="lhotse")
    records = [json.loads(x) for x in lines]
    assert [(r["audio_filepath"], r["offset"], r["duration"]) for r in records] == [
        ("awb/awb_000.flac", 0.0, 2.0),
        ("awb/awb_000.flac", 2.5, 1.5),
    ]
    assert records[0]["lang"] == "en" and "lang" not in records[1]  # a language code is the record's lang
    assert records[1]["emotion"] == "calm" and "emotion" not in records[0]  # custom fields ride along
    assert stats["records_in"] == 2 == stats["records_out"]

    # a truncated cut (start 1.0 into the recording) moves its supervisions with it
    record = json.loads(supervision_record({"start": 0.5, "duration": 1.0}, recording.to_dict(), 1.0))
    assert record["offset"] == 1.5


def test_each_lhotse_refusal_is_a_reject_naming_the_supervision(tmp_path):
    recording = Recording.from_file(DEMO / "audio" / "awb" / "awb_001.flac", recording_id="ok").to_dict()
    command = {
        **recording,
        "id": "cmd",
        "sources": [{"type": "command", "channels": [0], "source": "rm -rf /"}],
    }
    memory = {**recording, "id": "mem", "sources": [{"type": "memory", "channels": [0], "source": "AAAA"}]}
    two = {**recording, "id": "two", "sources": [recording["sources"][0], recording["sources"][0]]}
    speed = {**recording, "id": "speed", "transforms": [{"name": "Speed", "kwargs": {"factor": 1.1}}]}
    escape = {
        **recording,
        "id": "escape",
        "sources": [{"type": "file", "channels": [0], "source": "../../x.flac"}],
    }
    url = {
        **recording,
        "id": "url",
        "sources": [{"type": "url", "channels": [0], "source": "s3://b/awb_001.flac"}],
    }
    write_jsonl(tmp_path / "recordings.jsonl", [recording, command, memory, two, speed, escape, url])
    sup = {"start": 0.0, "duration": 2.635, "channel": 0, "text": "Glue the sheet.", "speaker": "awb"}
    sups = [
        {**sup, "id": "s-ok", "recording_id": "ok"},
        {**sup, "id": "s-cmd", "recording_id": "cmd"},
        {**sup, "id": "s-mem", "recording_id": "mem"},
        {**sup, "id": "s-two", "recording_id": "two"},
        {**sup, "id": "s-speed", "recording_id": "speed"},
        {**sup, "id": "s-gone", "recording_id": "gone"},
        {**sup, "id": "s-escape", "recording_id": "escape"},
        "{not json",
        {**sup, "id": "s-nospeaker", "recording_id": "ok", "speaker": None, "start": 0.5, "duration": 1.0},
        {**sup, "id": "s-url", "recording_id": "url"},  # an s3:// source under a local audio root
    ]
    write_jsonl(tmp_path / "supervisions.jsonl", sups)
    lines, stats, rejected = _prepare(
        tmp_path,
        tmp_path / "supervisions.jsonl",
        form="lhotse",
        recordings=str(tmp_path / "recordings.jsonl"),
    )
    assert [json.loads(x)["audio_filepath"] for x in lines] == ["awb/awb_001.flac"]
    found = {
        row["supervision"]: (reason.stem, row["detail"])
        for reason in rejected.glob("*.jsonl")
        for row in read_jsonl(reason)
    }
    assert {k: v[0] for k, v in found.items()} == {
        2: "unsupported_source",
        3: "unsupported_source",
        4: "unsupported_source",
        5: "unsupported_source",
        6: "missing_recording",
        7: "path_escapes_root",
        8: "malformed_json",
        9: "missing_field",
        10: "path_escapes_root",
    }
    assert "'s-cmd'" in found[2][1] and "command" in found[2][1] and "runs no command" in found[2][1]
    assert "'memory'" in found[3][1]
    assert "2 sources" in found[4][1]
    assert "Speed" in found[5][1]
    assert "'s-gone'" in found[6][1] and "'gone'" in found[6][1] and "recordings.jsonl" in found[6][1]
    assert "supervision line 8" in found[8][1]
    assert "is a URL, outside the local audio root" in found[10][1]
    assert stats["records_in"] == 10 == stats["records_out"] + stats["rejected_total"]
    # the reject holds the supervision as lhotse wrote it
    (row,) = read_jsonl(rejected / "missing_recording.jsonl")
    assert json.loads(row["original"])["id"] == "s-gone"

    # the same corpus as cuts: a cut that is no MonoCut, and one without supervisions, are refused
    mono = {
        "id": "c1",
        "start": 0.0,
        "duration": 2.635,
        "channel": 0,
        "recording": recording,
        "type": "MonoCut",
    }
    cuts = [
        {**mono, "supervisions": [{**sup, "id": "s1", "recording_id": "ok"}]},
        {**mono, "id": "c2", "supervisions": []},
        {"id": "c3", "type": "MixedCut", "tracks": []},
        {
            **mono,
            "id": "c4",
            "recording": command,
            "supervisions": [{**sup, "id": "s4", "recording_id": "cmd"}],
        },
    ]
    write_jsonl(tmp_path / "cuts" / "cuts.jsonl", cuts)
    lines, stats, rejected = _prepare(tmp_path / "cuts", tmp_path / "cuts" / "cuts.jsonl", form="lhotse")
    assert len(lines) == 1
    reasons = {
        row["supervision"]: (r.stem, row["detail"]) for r in rejected.glob("*.jsonl") for row in read_jsonl(r)
    }
    assert {k: v[0] for k, v in reasons.items()} == {
        2: "unsupported_cut",
        3: "unsupported_cut",
        4: "unsupported_source",
    }
    assert "'c2' holds no supervision" in reasons[2][1] and "'c3' is a MixedCut" in reasons[3][1]
    assert stats["records_in"] == 4 == stats["records_out"] + stats["rejected_total"]


def test_a_bad_recordings_manifest_is_one_clear_error(tmp_path):
    recording = Recording.from_file(DEMO / "audio" / "awb" / "awb_001.flac", recording_id="ok").to_dict()
    write_jsonl(tmp_path / "sups.jsonl", [{"id": "s", "recording_id": "ok", "start": 0, "duration": 1.0}])
    write_jsonl(tmp_path / "twice.jsonl", [recording, {"id": "other", "sources": []}, recording])
    with pytest.raises(SharflowError, match=r"twice\.jsonl: recording 'ok' on line 1 and again on line 3"):
        list(LhotseManifest(str(tmp_path / "sups.jsonl"), str(tmp_path / "twice.jsonl")).chunks())
    (tmp_path / "broken.jsonl.gz").write_bytes(gzip.compress(b'{"id": "a"}\n')[:-9])
    with pytest.raises(SharflowError, match=r"broken\.jsonl\.gz: not readable as gzip JSON lines"):
        list(LhotseManifest(str(tmp_path / "sups.jsonl"), str(tmp_path / "broken.jsonl.gz")).chunks())


def test_default_speaker_names_the_speaker_of_records_without_one(tmp_path):
    record = read_jsonl(DEMO / "manifest.json")[0]
    del record["speaker"]
    write_jsonl(tmp_path / "m.json", [record, {**record, "speaker": None}])
    lines, stats, _ = _prepare(tmp_path / "no", tmp_path / "m.json")
    assert lines == [] and stats["rejected"] == {"missing_field": 1, "bad_speaker": 1}  # null: not an id
    lines, stats, _ = _prepare(tmp_path / "yes", tmp_path / "m.json", default_speaker="lj")
    assert [json.loads(x)["speaker"] for x in lines] == ["| Language:en Dataset:demo Speaker:lj |"]
    assert stats["rejected"] == {
        "duplicate": 1
    }  # the second is the same file again: accepted, then a duplicate


def _ljspeech_corpus(folder: Path) -> list[tuple[str, str, str]]:
    rows = [
        ("LJ001-0001", "Printing, in the only sense.", "Printing, in the only sense."),
        (
            "LJ001-0002",
            "In being comparatively modern, 1 of 3.",
            "In being comparatively modern, one of three.",
        ),
        ("LJ002-0001", "The old Newgate.", "The old Newgate."),
    ]
    for i, (name, _, _) in enumerate(rows):
        write_tone(folder / "wavs" / f"{name}.wav", 1.0 + 0.25 * i, rate=22050)
    (folder / "metadata.csv").write_text("".join(f"{a}|{b}|{c}\n" for a, b, c in rows))
    return rows


def test_a_lhotse_recipe_runs_by_name_as_the_first_job_of_the_workflow(tmp_path):
    rows = _ljspeech_corpus(tmp_path / "LJSpeech-1.1")
    config = validate_config(
        {
            "datasets": {
                "lj": {
                    "recipe": "ljspeech",
                    "audio_root": str(tmp_path / "LJSpeech-1.1"),
                    "default_speaker": "lj",
                }
            }
        },
        SCHEMA,
    )
    run_snakemake(tmp_path / "run", config, "results/lj/prepare/stats.json")
    results = tmp_path / "run" / "results" / "lj"
    recipe = json.loads((results / "recipe" / "stats.json").read_text())
    assert (recipe["recipe"], recipe["recordings"], recipe["supervisions"]) == ("ljspeech", 3, 3)
    records = read_jsonl(results / "prepare" / "prepared.jsonl")
    assert [(r["audio_filepath"], r["text"], r["normalized_text"]) for r in records] == [
        (f"wavs/{a}.wav", b, c) for a, b, c in rows
    ]
    assert {r["speaker"] for r in records} == {"| Language:en Dataset:lj Speaker:lj |"}
    assert [r["duration"] for r in records] == [
        1.0,
        round(1.25 * 22050) / 22050,
        1.5,
    ]  # the file's exact length
    assert all("offset" in r and r["offset"] == 0 for r in records)
    # the recipe's manifests are byte-identical when run again (no time stamp in the gzip)
    again = run_recipe(
        "ljspeech",
        str(tmp_path / "LJSpeech-1.1"),
        recordings=str(tmp_path / "r.jsonl.gz"),
        supervisions=str(tmp_path / "s.jsonl.gz"),
        stats=str(tmp_path / "stats.json"),
        dataset="lj",
    )
    assert again["supervisions"] == 3
    assert (tmp_path / "s.jsonl.gz").read_bytes() == (
        results / "recipe" / "supervisions.jsonl.gz"
    ).read_bytes()


def _libritts_part(corpus: Path, part: str, speaker: str, texts: list[str]) -> None:
    chapter = corpus / part / speaker / "1000"
    ids = [f"{speaker}_1000_{i:06d}_000000" for i in range(len(texts))]
    for i, utt in enumerate(ids):
        write_tone(chapter / f"{utt}.wav", 0.5 + 0.1 * i, rate=24000)
    (chapter / f"{speaker}_1000.trans.tsv").write_text(
        "".join(f"{u}\t{t}\t{t}\n" for u, t in zip(ids, texts, strict=True))
    )
    (chapter / f"{speaker}_1000.book.tsv").write_text("".join(f"{u}\tx\tx\t20.5\n" for u in ids))


def test_recipe_options_reach_the_recipe_and_parts_come_in_sorted_order(tmp_path):
    corpus = tmp_path / "LibriTTS_R"
    _libritts_part(corpus, "test-clean", "121", ["Test one.", "Test two."])
    _libritts_part(corpus, "dev-clean", "84", ["Dev one.", "Dev two.", "Dev three."])
    files = {k: str(tmp_path / f"{k}.jsonl.gz") for k in ("recordings", "supervisions", "stats")}

    def supervisions(**options):
        stats = run_recipe("libritts_r", str(corpus), dataset="r", options=options, **files)
        return stats["parts"], [(s["speaker"], s["text"]) for s in read_jsonl_gz(files["supervisions"])]

    parts, sups = supervisions(dataset_parts=["test-clean", "dev-clean"])
    assert parts == ["dev-clean", "test-clean"]
    assert sups == [
        ("84", "Dev one."),
        ("84", "Dev two."),
        ("84", "Dev three."),
        ("121", "Test one."),
        ("121", "Test two."),
    ]
    assert supervisions(dataset_parts=["test-clean"]) == (["test-clean"], sups[3:])


def read_jsonl_gz(path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_a_recipe_names_what_is_wrong(tmp_path):
    corpus = tmp_path / "LJSpeech-1.1"
    _ljspeech_corpus(corpus)
    files = {k: str(tmp_path / f"{k}.x") for k in ("recordings", "supervisions", "stats")}
    with pytest.raises(SharflowError, match=r"recipe 'ljspeeh' is not one of lhotse's recipes.*ljspeech"):
        run_recipe("ljspeeh", str(corpus), dataset="lj", **files)
    with pytest.raises(SharflowError, match=r"recipe_options names 'mic_id'.*prepare_ljspeech does not take"):
        run_recipe("ljspeech", str(corpus), dataset="lj", options={"mic_id": "mic1"}, **files)
    with pytest.raises(SharflowError, match=r"recipe_options names 'output_dir'"):
        run_recipe("ljspeech", str(corpus), dataset="lj", options={"output_dir": "/etc"}, **files)
    with pytest.raises(SharflowError, match=r"prepare_ljspeech failed over .*metadata\.csv"):
        run_recipe("ljspeech", str(tmp_path), dataset="lj", **files)
    assert not any(Path(p).exists() for p in files.values())


@pytest.mark.parametrize(
    "dataset, problem",
    [
        ({"audio_root": "a"}, "datasets.x: give exactly one of manifest or recipe"),
        (
            {"audio_root": "a", "manifest": "m", "recipe": "vctk"},
            "datasets.x: give exactly one of manifest or recipe",
        ),
        (
            {"audio_root": "a", "manifest": "m", "recordings": "r"},
            "datasets.x.recordings: only with format lhotse",
        ),
        (
            {"audio_root": "a", "recipe": "vctk", "format": "lhotse", "recordings": "r"},
            "datasets.x.recordings",
        ),
        (
            {"audio_root": "a", "manifest": "m", "recipe_options": {"mic_id": "x"}},
            "recipe_options: only with a recipe",
        ),
    ],
)
def test_the_config_says_which_corpus_keys_go_together(dataset, problem):
    with pytest.raises(SharflowError, match=problem.replace(".", r"\.")):
        validate_config({"datasets": {"x": dataset}}, SCHEMA)


# ---- WebDataset tars ---------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _demo_as_webdataset(folder: Path, n_tars: int = 3, speakers=None) -> tuple[list[Path], list[dict]]:
    """The demo's whole-file records as Emilia ships a corpus: tars of `<key>.flac` + `<key>.json`
    (id, text, duration, speaker, language, dnsmos), the key the file's path without its extension."""
    records = [r for r in read_jsonl(DEMO / "manifest.json") if "offset" not in r]
    records = [r for r in records if speakers is None or r["speaker"] in speakers]
    per_tar = -(-len(records) // n_tars)
    tars = []
    for n in range(0, len(records), per_tar):
        tars.append(folder / f"EN-B{n // per_tar:06d}.tar")
        tars[-1].parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tars[-1], "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, r in enumerate(records[n : n + per_tar], start=n):
                key = r["audio_filepath"].rsplit(".", 1)[0]
                meta = {"id": key, "text": r["text"], "duration": r["duration"], "speaker": r["speaker"]}
                meta |= {"language": "en", "dnsmos": 3.0 + i / 100}
                _add(tar, f"{key}.json", json.dumps(meta).encode())
                _add(tar, f"{key}.flac", (DEMO / "audio" / r["audio_filepath"]).read_bytes())
    return tars, records


def test_webdataset_tars_prepare_like_the_manifest_and_every_stage_reads_the_audio_inside(tmp_path):
    tars, records = _demo_as_webdataset(tmp_path / "emilia" / "EN")
    write_jsonl(tmp_path / "loose.json", records)
    nemo = [json.loads(x) for x in _prepare(tmp_path / "nemo", tmp_path / "loose.json")[0]]
    assert len(tars) == 3 and len(nemo) == len(records) > 20

    lines, stats, _ = _prepare(
        tmp_path / "wds",
        "EN-B{000000..000002}.tar",
        root=tmp_path / "emilia" / "EN",
        form="webdataset",
        extra_fields=["dnsmos"],
    )
    got = [json.loads(x) for x in lines]
    assert stats["records_in"] == stats["records_out"] == len(records)
    # the same records but where the audio lies, the language code as lang, and dnsmos riding along
    assert [r["audio_filepath"] for r in got] == [
        f"EN-B{i // -(-len(records) // 3):06d}.tar#{r['audio_filepath']}" for i, r in enumerate(records)
    ]
    assert [r["dnsmos"] for r in got] == [3.0 + i / 100 for i in range(len(records))]
    assert {r["lang"] for r in got} == {"en"}
    drop = ("audio_filepath", "dnsmos", "lang")
    assert [{k: v for k, v in r.items() if k not in drop} for r in got] == [
        {k: v for k, v in r.items() if k != "audio_filepath"} for r in nemo
    ]
    # a folder of tars reads the same; all of the JSON rides along without extra_fields
    lines, _, _ = _prepare(
        tmp_path / "folder", tmp_path / "emilia", root=tmp_path / "emilia", form="webdataset"
    )
    assert [json.loads(x)["audio_filepath"] for x in lines] == [f"EN/{r['audio_filepath']}" for r in got]
    assert {tuple(sorted(json.loads(x))) for x in lines} == {
        ("audio_filepath", "dnsmos", "duration", "id", "lang", "offset", "source_audio", "speaker", "text")
    }

    # every reading of audio finds the same bytes and samples inside the tar as in the loose file
    root = str(tmp_path / "emilia" / "EN")
    for w, n in zip(got[::7], nemo[::7], strict=True):
        inside, _ = resolve_audio_path(root, w["audio_filepath"])
        loose = str(DEMO / "audio" / n["audio_filepath"])
        assert probe_audio(inside) == probe_audio(loose)
        for offset, duration in ((0.0, w["duration"]), (0.5, 1.0)):
            a, b = read_span(inside, offset, duration), read_span(loose, offset, duration)
            assert np.array_equal(a[0], b[0]) and a[1:] == b[1:] and np.abs(a[0]).max() > 0
        assert containers.size(inside) == os.path.getsize(loose)
        assert containers.stamp(inside)[0] == os.path.getsize(loose)
        assert recording_id(w["audio_filepath"]) == recording_id(n["audio_filepath"])
        settings = EncodeSettings(audio_root=root)
        assert copy_through(inside, 0.0, w["duration"], settings) == copy_through(
            loose, 0.0, w["duration"], settings
        )
    assert not containers.exists(f"{tars[0]}#nothing.flac") and containers.exists(
        f"{tars[0]}#{records[0]['audio_filepath']}"
    )


def test_prepare_keeps_each_tars_index_and_no_later_reader_scans_its_headers(tmp_path, monkeypatch):
    """A tar's member index is kept in sharflow's cache by prepare's pass; a later job (a fresh process)
    loads it instead of reading the tar's headers; a tar rewritten is indexed again, as a fresh scan."""
    monkeypatch.setenv("SHARFLOW_CACHE_DIR", str(tmp_path / "cache"))
    tars, _ = _demo_as_webdataset(tmp_path / "wds", n_tars=2, speakers=("awb", "rms"))
    lines, _, _ = _prepare(
        tmp_path / "p", "EN-B{000000..000001}.tar", root=tmp_path / "wds", form="webdataset"
    )

    def fresh(tar: Path) -> dict:
        with tarfile.open(tar) as t:
            return {i.name: (i.offset_data, i.size) for i in t if i.isfile()}

    assert len(list((tmp_path / "cache" / "tar-index").rglob("*.json"))) == 2
    containers._tar_index.cache_clear()  # a later job's process
    scans = []
    real_scan = containers.scan_tar
    monkeypatch.setattr(containers, "scan_tar", lambda *a: scans.append(a) or real_scan(*a))
    for tar in tars:
        assert containers.tar_index(str(tar)) == fresh(tar) and len(fresh(tar)) >= 16
    record = json.loads(lines[-1])
    inside = str(tmp_path / "wds" / record["audio_filepath"])
    loose = DEMO / "audio" / record["audio_filepath"].split("#")[1]
    d = record["duration"]
    assert np.array_equal(read_span(inside, 0.0, d)[0], read_span(str(loose), 0.0, d)[0])
    assert scans == []  # every index came from the cache

    # the first tar rewritten with one sample fewer: its index is built again and is the fresh one
    with tarfile.open(tars[0]) as t:
        kept = [(i, t.extractfile(i).read()) for i in t.getmembers()[2:]]
    with tarfile.open(tars[0], "w", format=tarfile.USTAR_FORMAT) as t:
        for info, data in kept:
            t.addfile(info, io.BytesIO(data))
    containers._tar_index.cache_clear()
    assert containers.tar_index(str(tars[0])) == fresh(tars[0]) and len(scans) == 1
    assert containers.tar_index(str(tars[1])) == fresh(tars[1]) and len(scans) == 1
    assert len(list((tmp_path / "cache" / "tar-index").rglob("*.json"))) == 3


def test_each_webdataset_fault_is_a_reject_naming_the_tar_and_sample(tmp_path):
    flac = (DEMO / "audio" / "awb" / "awb_001.flac").read_bytes()
    meta = json.dumps({"text": "Glue the sheet.", "duration": 2.635, "speaker": "awb"}).encode()
    tars = tmp_path / "tars"
    tars.mkdir()
    with tarfile.open(tars / "a.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in [
            ("ok.json", meta),
            ("ok.flac", flac),
            ("nojson.flac", flac),
            ("noaudio.json", meta),
            ("badjson.json", b"{not json"),
            ("badjson.flac", flac),
            ("noise.json", meta),
            ("noise.flac", b"not audio at all" * 100),
            ("../up.json", meta),
            ("../up.flac", flac),
        ]:
            _add(tar, name, data)
    with tarfile.open(tars / "b.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in [("ok.json", meta), ("ok.flac", flac), ("last.json", meta), ("last.flac", flac)]:
            _add(tar, name, data)  # ok: the key of a.tar again
    whole = (tars / "b.tar").read_bytes()
    cut = whole.rindex(b"fLaC") + 1000  # inside last.flac
    (tars / "b.tar").write_bytes(whole[:cut])
    lines, stats, rejected = _prepare(tmp_path / "out", tars, root=tmp_path, form="webdataset")
    assert [json.loads(x)["audio_filepath"] for x in lines] == ["tars/a.tar#ok.flac"]
    found = {
        row["sample"]: (r.stem, row["detail"]) for r in rejected.glob("*.jsonl") for row in read_jsonl(r)
    }
    assert {k: v[0] for k, v in found.items()} == {
        2: "missing_metadata",
        3: "missing_audio",
        4: "malformed_json",
        5: "unreadable_audio",
        6: "path_escapes_root",
        7: "duplicate_key",
        8: "truncated_container",
    }
    a, b = str(tars / "a.tar"), str(tars / "b.tar")
    assert f"{a}, sample 'nojson': audio member nojson.flac has no .json" in found[2][1]
    assert f"{a}, sample 'noaudio': noaudio.json has no audio member" in found[3][1]
    assert f"{a}, sample 'badjson': badjson.json:" in found[4][1]
    assert "a.tar#noise.flac" in found[5][1]
    assert f"{a}, sample '../up'" in found[6][1]
    assert f"{b}, sample 'ok': the key is in {a} already" in found[7][1]
    assert f"{b}, sample 'last': the tar ends inside last.flac" in found[8][1]
    assert stats["records_in"] == 8 == stats["records_out"] + stats["rejected_total"]


def test_a_webdataset_field_mapping_names_the_fields_and_what_rides_along(tmp_path):
    flac = (DEMO / "audio" / "awb" / "awb_001.flac").read_bytes()
    meta = {
        "transcript": "Glue the sheet.",
        "secs": 2.635,
        "spk": "awb",
        "lang_code": "en",
        "snr": 31.0,
        "x": 1,
    }
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        _add(tar, "k.json", json.dumps(meta).encode())
        _add(tar, "k.flac", flac)
    fields = {"text": "transcript", "duration": "secs", "speaker": "spk", "language": "lang_code"}
    lines, _, _ = _prepare(tmp_path / "a", "s.tar", root=tmp_path, form="webdataset", fields=fields)
    (record,) = [json.loads(x) for x in lines]
    assert (record["text"], record["duration"], record["lang"]) == ("Glue the sheet.", 2.635, "en")
    assert record["speaker"] == "| Language:en Dataset:demo Speaker:awb |"
    assert (record["snr"], record["x"]) == (31.0, 1) and "transcript" not in record and "spk" not in record
    lines, _, _ = _prepare(
        tmp_path / "b", "s.tar", root=tmp_path, form="webdataset", fields=fields, extra_fields=["snr"]
    )
    (record,) = [json.loads(x) for x in lines]
    assert record["snr"] == 31.0 and "x" not in record
    _, stats, _ = _prepare(
        tmp_path / "c", "s.tar", root=tmp_path, form="webdataset"
    )  # Emilia's names: absent
    assert stats["rejected"] == {"missing_field": 1}


CHOSEN = ("awb", "rms", "slt")


def run_webdataset_and_manifest(tmp_path: Path) -> Path:
    """One workflow over the same clips twice: `loose` (a NeMo manifest over files) and `wds` (Emilia's
    form, the audio inside the tars); its results folder (conftest's webdataset_run, in the background)."""
    _, records = _demo_as_webdataset(tmp_path / "wds", n_tars=2, speakers=CHOSEN)
    write_jsonl(tmp_path / "loose.json", records)
    # no quality stage: its reads inside tars are the ones the tests above compare (load_span is
    # read_span), and its models cost a minute of this test
    config = demo_config(quality={"enabled": False}, context={"parts": 1})
    config["datasets"] = {
        "loose": {"manifest": str(tmp_path / "loose.json"), "audio_root": str(DEMO / "audio")},
        "wds": {
            "format": "webdataset",
            "manifest": "EN-B{000000..000001}.tar",
            "audio_root": str(tmp_path / "wds"),
            "extra_fields": ["dnsmos"],
        },
    }
    run_snakemake(tmp_path / "run", config, timeout=LONG_RUN)
    return tmp_path / "run" / "results"


def test_a_webdataset_corpus_runs_the_workflow_to_the_same_shar_as_its_manifest(webdataset_run):
    """The Shar sets of the two forms hold the same cuts and the same decoded audio, NeMo's MagpieTTS
    dataset reads the tar-born one. (Each clip keeps its cut id in both forms.)"""
    results, chosen = webdataset_run, CHOSEN
    shar = {}
    for name in ("loose", "wds"):
        fields = {f: data_files(results / name / "shar" / f) for f in FIELDS}
        shar[name] = {c.id: c for c in CutSet.from_shar(fields=fields)}
    loose, wds = shar["loose"], shar["wds"]
    speakers = {c.supervisions[0].speaker.split("Speaker:")[1].strip(" |") for c in wds.values()}
    assert len(wds) > 10 and speakers == set(chosen)  # what is compared: many cuts, every chosen voice
    assert sorted(loose) == sorted(wds)
    for cid, cut in wds.items():
        other = loose[cid]
        assert (cut.supervisions[0].text, cut.duration) == (other.supervisions[0].text, other.duration)
        assert cut.supervisions[0].custom["dnsmos"] >= 3.0
        assert np.array_equal(cut.target_audio.load_audio(), other.target_audio.load_audio())
        assert np.array_equal(cut.context_audio.load_audio(), other.context_audio.load_audio())

    dataset = magpie_dataset(load_16khz_audio=True)
    codes = {
        f: data_files(results / "wds" / "shar" / "codes_tiny_nemo" / f)
        for f in ("target_codes", "context_codes")
    }
    fields = {f: data_files(results / "wds" / "shar" / f) for f in FIELDS} | codes
    batch = dataset[CutSet(list(CutSet.from_shar(fields=fields))[:4])]
    assert batch["audio_codes"].shape[:2] == (4, 8) and batch["context_audio_codes"].shape[:2] == (4, 8)


def test_a_members_stamp_changes_with_its_tar_and_its_place_and_not_with_its_neighbours(tmp_path):
    """What reused quality measures and identity fingerprints are keyed by, for audio inside a tar."""
    flac = (DEMO / "audio" / "awb" / "awb_001.flac").read_bytes()

    def write(members, ns):
        with tarfile.open(tmp_path / "s.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in members:
                _add(tar, name, data)
        os.utime(tmp_path / "s.tar", ns=(ns, ns))

    member = f"{tmp_path / 's.tar'}#k.flac"
    write([("j.json", b"{}"), ("k.flac", flac)], 10**18)
    first = containers.stamp(member)
    assert first[0] == len(flac) and containers.stamp(member) == first
    write([("j.json", b"{}"), ("k.flac", flac[:-1] + b"\0")], 2 * 10**18)  # same size, tar rewritten
    assert containers.stamp(member) != first
    write([("j.json", b"{}"), ("k.flac", flac[:-1] + b"\0")], 10**18)  # the same time again: the same
    assert containers.stamp(member) == first
    write([("j.json", b'{"a": 1}' + b" " * 600), ("k.flac", flac)], 3 * 10**18)  # moved by a neighbour
    assert containers.stamp(member)[1][-1] == first[1][-1] + 512 and containers.stamp(member)[0] == len(flac)


# ---- Parquet with the audio inside -------------------------------------------------------------

AUDIO_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _demo_as_hub_parquet(path: Path, row_group_size: int = 7) -> list[dict]:
    """The demo's whole-file records as the Hub ships LibriTTS-R: an Audio column (bytes, path),
    text_normalized, speaker_id and id, no duration; small row groups, so reads cross them."""
    records = [r for r in read_jsonl(DEMO / "manifest.json") if "offset" not in r]
    table = pa.table(
        {
            "audio": pa.array(
                [
                    {
                        "bytes": (DEMO / "audio" / r["audio_filepath"]).read_bytes(),
                        "path": r["audio_filepath"],
                    }
                    for r in records
                ],
                type=AUDIO_STRUCT,
            ),
            "text_normalized": [r["text"] for r in records],
            "speaker_id": [r["speaker"] for r in records],
            "id": [r["audio_filepath"].rsplit(".", 1)[0] for r in records],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=row_group_size)
    return records


HUB_FIELDS = {"text": "text_normalized", "speaker": "speaker_id"}


def test_hub_parquet_with_audio_prepares_like_the_manifest_and_every_stage_reads_the_rows(tmp_path):
    path = tmp_path / "hub" / "train-00000-of-00001.parquet"
    records = _demo_as_hub_parquet(path)
    assert pq.ParquetFile(path).metadata.num_row_groups > 3
    write_jsonl(tmp_path / "loose.json", records)
    # the Hub gives no duration: a row's is its audio's length, as duration_from_file gives a manifest's
    nemo = [
        json.loads(x)
        for x in _prepare(tmp_path / "nemo", tmp_path / "loose.json", duration_from_file=True)[0]
    ]
    lines, stats, _ = _prepare(
        tmp_path / "pq",
        "train-00000-of-00001.parquet",
        root=tmp_path / "hub",
        form="parquet_audio",
        fields=HUB_FIELDS,
        extra_fields=["id"],
    )
    got = [json.loads(x) for x in lines]
    assert stats["records_in"] == stats["records_out"] == len(records) > 20
    assert [r["audio_filepath"] for r in got] == [
        f"train-00000-of-00001.parquet#{i}" for i in range(len(records))
    ]
    assert [r["id"] for r in got] == [r["audio_filepath"].rsplit(".", 1)[0] for r in records]
    assert [{k: v for k, v in r.items() if k not in ("audio_filepath", "id")} for r in got] == [
        {k: v for k, v in r.items() if k != "audio_filepath"} for r in nemo
    ]
    root = str(tmp_path / "hub")
    for w, n in list(zip(got, nemo, strict=True))[::5]:
        inside, _ = resolve_audio_path(root, w["audio_filepath"])
        loose = str(DEMO / "audio" / n["audio_filepath"])
        assert probe_audio(inside) == probe_audio(loose)
        a, b = read_span(inside, 0.5, 1.0), read_span(loose, 0.5, 1.0)
        assert np.array_equal(a[0], b[0]) and np.abs(a[0]).max() > 0
        assert containers.size(inside) == os.path.getsize(loose)
        settings = EncodeSettings(audio_root=root)
        assert copy_through(inside, 0.0, w["duration"], settings) == copy_through(
            loose, 0.0, w["duration"], settings
        )
    assert not containers.exists(f"{path}#{len(records)}") and containers.exists(f"{path}#0")


def test_each_hub_parquet_fault_names_the_file_and_the_row_or_its_columns(tmp_path):
    flac = (DEMO / "audio" / "awb" / "awb_001.flac").read_bytes()
    audio = [
        {"bytes": flac, "path": "a"},
        None,
        {"bytes": b"no audio here" * 50, "path": "c"},
        {"bytes": flac, "path": "d"},
    ]
    table = pa.table(
        {
            "audio": pa.array(audio, type=AUDIO_STRUCT),
            "text_normalized": ["One.", "Two.", "Three.", None],
            "speaker_id": ["s1", "s2", "s3", "s4"],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    lines, stats, rejected = _prepare(
        tmp_path / "o", "t.parquet", root=tmp_path, form="parquet_audio", fields=HUB_FIELDS
    )
    assert len(lines) == 1
    found = {row["row"]: (r.stem, row["detail"]) for r in rejected.glob("*.jsonl") for row in read_jsonl(r)}
    assert {k: v[0] for k, v in found.items()} == {
        1: "missing_audio",
        2: "unreadable_audio",
        3: "missing_field",
    }
    assert f"{tmp_path / 't.parquet'}, row 1: column 'audio' holds no audio" in found[1][1]
    assert f"{tmp_path / 't.parquet'}, row 2: column 'audio' does not decode" in found[2][1]
    assert stats["records_in"] == 4 == stats["records_out"] + stats["rejected_total"]
    with pytest.raises(
        SharflowError,
        match=r"t\.parquet: no column for text \('text'\), speaker \('speaker'\); "
        r"its columns are audio, text_normalized, speaker_id",
    ):
        _prepare(tmp_path / "p", "t.parquet", root=tmp_path, form="parquet_audio")


def test_the_audio_column_is_the_one_fields_names(tmp_path):
    flac = (DEMO / "audio" / "awb" / "awb_001.flac").read_bytes()
    table = pa.table(
        {
            "speech": pa.array([{"bytes": flac, "path": "a"}], type=AUDIO_STRUCT),
            "audio": ["not the audio"],
            "text": ["Glue the sheet."],
            "speaker": ["awb"],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    lines, _, _ = _prepare(
        tmp_path / "o", "t.parquet", root=tmp_path, form="parquet_audio", fields={"audio": "speech"}
    )
    (record,) = [json.loads(x) for x in lines]
    assert record["audio_filepath"] == "t.parquet#0:speech" and record["audio"] == "not the audio"
    assert record["source_audio"]["num_samples"] == sf.info(io.BytesIO(flac)).frames


def test_webdataset_tars_and_hub_parquet_read_from_object_storage_as_from_a_folder(s3, tmp_path):
    _demo_as_webdataset(tmp_path / "wds", n_tars=2, speakers=("awb", "rms"))
    _demo_as_hub_parquet(tmp_path / "hub" / "train.parquet")
    url = s3.bucket("containers")
    s3.upload_tree(tmp_path / "wds", f"{url}/wds")
    s3.upload_tree(tmp_path / "hub", f"{url}/hub")
    pattern = "EN-B{000000..000001}.tar"
    local, _, _ = _prepare(tmp_path / "local", pattern, root=tmp_path / "wds", form="webdataset")
    remote, stats, _ = _prepare(tmp_path / "remote", pattern, root=f"{url}/wds", form="webdataset")
    assert remote == local and stats["records_out"] == 16  # the same records, addressed the same way
    record = json.loads(remote[3])
    inside, _ = resolve_audio_path(f"{url}/wds", record["audio_filepath"])
    assert inside == f"{url}/wds/{record['audio_filepath']}" and "#" in inside
    a, b = read_span(inside, 0.0, 1.0), read_span(str(tmp_path / "wds" / record["audio_filepath"]), 0.0, 1.0)
    assert np.array_equal(a[0], b[0]) and np.abs(a[0]).max() > 0
    assert containers.stamp(inside)[1][1] == storage.head(inside.split("#")[0]).etag  # a tar object's version

    local, _, _ = _prepare(
        tmp_path / "hl", "train.parquet", root=tmp_path / "hub", form="parquet_audio", fields=HUB_FIELDS
    )
    remote, _, _ = _prepare(
        tmp_path / "hr", "train.parquet", root=f"{url}/hub", form="parquet_audio", fields=HUB_FIELDS
    )
    assert remote == local and len(local) > 20

    # a folder: every tar (Parquet file) below it, listed under s3:// as globbed locally, in one order
    storage.client().put_object(Bucket="containers", Key="wds/notes.txt", Body=b"not a shard")
    for folder, form, fields in (("wds", "webdataset", None), ("hub", "parquet_audio", HUB_FIELDS)):
        local, _, _ = _prepare(tmp_path / f"{form}-lf", folder, root=tmp_path, form=form, fields=fields)
        remote, _, _ = _prepare(tmp_path / f"{form}-rf", folder, root=url, form=form, fields=fields)
        assert remote == local and len(local) >= 16
    assert storage.list_folder(f"{url}/wds/", ".tar") == [f"{url}/wds/EN-B00000{i}.tar" for i in range(2)]
    assert storage.list_folder(f"{url}/nothing", ".tar") == []


def test_a_clip_in_a_tar_is_the_same_utterance_to_the_identity_stage_as_the_loose_file(tmp_path):
    """The identity stage keys and fingerprints what it decodes: a clip inside a tar gets the loose
    file's sample digest (the duplicate check) and content fingerprint (the held-out check)."""
    _, records = _demo_as_webdataset(tmp_path / "wds", n_tars=1, speakers=("awb",))
    write_jsonl(tmp_path / "loose.json", records[:3])
    loose = tmp_path / "nemo" / "prepare" / "prepared.jsonl"
    _prepare(tmp_path / "nemo", tmp_path / "loose.json")
    _prepare(tmp_path / "tar", "EN-B000000.tar", root=tmp_path / "wds", form="webdataset")
    tar = tmp_path / "tar" / "prepare" / "prepared.jsonl"
    tar.write_text("".join(tar.read_text().splitlines(keepends=True)[:3]))
    _, a = identity_part(tmp_path / "ia", loose, DEMO / "audio")
    _, b = identity_part(tmp_path / "ib", tar, tmp_path / "wds")
    digests = [[r["digest"] for r in read_jsonl(Path(files[0]))] for files in (a, b)]
    assert digests[0] == digests[1] and len(set(digests[0])) == 3  # three clips, each its own digest
    hashes = [np.load(files[1]) for files in (a, b)]
    assert np.array_equal(hashes[0], hashes[1]) and len(np.unique(hashes[0])) > 100
