"""sharflow.shar.format against lhotse's own classes and writers, byte for byte.

The reference here builds every cut with lhotse's MonoCut / SupervisionSegment / Recording and
writes it with lhotse's JsonlShardWriter and TarWriter (what the shard job did before it stopped
importing lhotse); sharflow.shar.format must give the same bytes.
"""

import io
import json
import tarfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from lhotse import AudioSource, MonoCut, Recording, SupervisionSegment
from lhotse.shar.utils import to_shar_placeholder
from lhotse.shar.writers import AudioTarWriter, JsonlShardWriter, TarWriter

from sharflow.core.blocks import shard_key
from sharflow.core.layout import DatasetFiles
from sharflow.core.speakers import parse_speaker
from sharflow.shar.audio import encode
from sharflow.shar.format import (
    CUT_KEYS,
    TarMemberWriter,
    cut_dict,
    cut_line,
    placeholder_bytes,
    placeholder_dict,
)
from sharflow.shar.plan import cut_id, read_job_inputs, recording_id, segment_id
from testkit import read_jsonl


def lhotse_cut(record: dict) -> MonoCut:
    """The reference: the cut built from lhotse's own classes."""
    rid = recording_id(record["audio_filepath"])
    src = record["source_audio"]
    recording = Recording(
        id=rid,
        sources=[
            AudioSource(
                type="file", channels=list(range(src["num_channels"])), source=record["audio_filepath"]
            )
        ],
        sampling_rate=src["sampling_rate"],
        num_samples=src["num_samples"],
        duration=src["num_samples"] / src["sampling_rate"],
    )
    # MagpieTTS reads lang and tokenizer_names (and validation_status) from the cut's own custom
    language = record.get("lang") or parse_speaker(record["speaker"]).language
    on_cut = {"lang": language}
    on_cut.update({k: record[k] for k in ("tokenizer_names", "validation_status") if k in record})
    custom = {k: v for k, v in record.items() if k not in CUT_KEYS}
    custom["context_recording_id"] = recording_id(record["context_audio_filepath"])
    supervision = SupervisionSegment(
        id=cut_id(record),
        recording_id=rid,
        start=0.0,
        duration=record["duration"],
        channel=0,
        text=record["text"],
        language=language,
        speaker=record["speaker"],
        custom=custom,
    )
    return MonoCut(
        id=cut_id(record),
        start=record["offset"],
        duration=record["duration"],
        channel=0,
        recording=recording,
        supervisions=[supervision],
        custom=on_cut,
    )


class LhotseAudioTar(AudioTarWriter):
    """lhotse's AudioTarWriter taking bytes already encoded, laid out as its write() lays them out."""

    def write_encoded(self, key: str, data: bytes, manifest: Recording) -> None:
        self.tar_writer.write(f"{key}.{self.format}", io.BytesIO(data))
        meta = io.BytesIO((json.dumps(to_shar_placeholder(manifest).to_dict()) + "\n").encode("utf-8"))
        self.tar_writer.write(f"{key}.json", meta, count=False)


def test_the_lhotse_reference_writer_is_lhotses_own_audio_layout(tmp_path):
    """The reference's write_encoded lays a member out as AudioTarWriter.write does (which encodes itself)."""
    pcm = (np.sin(np.arange(8000) / 9) * 20000).astype(np.int16)
    source = AudioSource(type="file", channels=[0], source="/x.flac")
    manifest = Recording(id="x", sources=[source], sampling_rate=16000, num_samples=8000, duration=0.5)
    with AudioTarWriter(str(tmp_path / "lhotse.tar"), shard_size=None, format="flac") as w:
        w.write("cut-1", pcm[None, :], 16000, manifest)
    data, _ = encode(pcm, 16000, "flac")
    with LhotseAudioTar(str(tmp_path / "ref.tar"), shard_size=None, format="flac") as w:
        w.write_encoded("cut-1", data, manifest)
    with TarMemberWriter(str(tmp_path / "ours.tar")) as w:
        w.write("cut-1.flac", data)
        w.write("cut-1.json", placeholder_bytes("x", 16000, 8000, 0.5))
    lhotse_bytes = (tmp_path / "lhotse.tar").read_bytes()
    assert (tmp_path / "ref.tar").read_bytes() == lhotse_bytes == (tmp_path / "ours.tar").read_bytes()


def test_demo_cuts_equal_lhotses_to_dict(with_context):
    records = read_jsonl(with_context[0])
    assert len(records) == 56 and len({cut_line(cut_dict(r)) for r in records}) == 56  # all differ
    for r in records:
        assert cut_dict(r) == lhotse_cut(r).to_dict()
        assert cut_line(cut_dict(r)) == json.dumps(lhotse_cut(r).to_dict(), ensure_ascii=False) + "\n"
        assert cut_dict(r)["recording"]["sources"][0]["source"] == r["audio_filepath"]  # location-free


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(-1e6, 1e6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    extra=st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda k: k not in CUT_KEYS), json_values),
    offset=st.one_of(st.just(0), st.floats(0, 1e4)),
    duration=st.floats(0.01, 100),
    channels=st.integers(1, 4),
    rate=st.sampled_from([8000, 16000, 22050, 44100]),
    text=st.text(max_size=30),
    status=st.one_of(st.none(), st.sampled_from(["OK", "bad", "Ünï"])),
    lang=st.one_of(st.none(), st.sampled_from(["en", "de", "zh"])),
    names=st.one_of(st.none(), st.lists(st.sampled_from(["english_phoneme", "german_chars"]), min_size=1)),
    name=st.text(st.characters(codec="utf-8", exclude_characters="/\\\x00"), min_size=1, max_size=10),
)
def test_any_record_gives_lhotses_cut_dict(
    extra, offset, duration, channels, rate, text, status, lang, names, name
):
    record = {
        **extra,
        "audio_filepath": f"d/{name}.flac",
        "offset": offset,
        "duration": duration,
        "text": text,
        "speaker": "| Language:de Dataset:x Speaker:ß |",
        "source_audio": {"sampling_rate": rate, "num_samples": 12345, "num_channels": channels},
        "context_audio_filepath": "c.wav",
    }
    if status is not None:
        record["validation_status"] = status
    if lang is not None:
        record["lang"] = lang
    if names is not None:
        record["tokenizer_names"] = names
    ours, theirs = cut_dict(record), lhotse_cut(record).to_dict()
    assert ours == theirs
    assert cut_line(ours) == json.dumps(theirs, ensure_ascii=False) + "\n"  # key order too


def test_placeholders_equal_lhotses():
    for segment, rate, n, duration in (
        ("a", 16000, 1, 0.0000625),
        ("seg-1-2", 22050, 44100, 2.0),
        ("é", 8000, 0, 0),
    ):
        recording = Recording(
            id=segment,
            sources=[AudioSource(type="file", channels=[0], source="/x.flac")],
            sampling_rate=rate,
            num_samples=n,
            duration=duration,
        )
        theirs = to_shar_placeholder(recording).to_dict()
        assert placeholder_dict(segment, rate, n, duration) == theirs
        assert placeholder_bytes(segment, rate, n, duration) == (json.dumps(theirs) + "\n").encode()


NAMES = ["a.flac", "x" * 100, "y" * 101, "z" * 300 + ".json", "Ünïcode-ß-名前.flac", "sp ace.wav"]


def test_tar_members_are_byte_identical_to_lhotses_tar_writer(tmp_path):
    sizes = [0, 1, 511, 512, 513, 10_239, 10_240, 30_001]
    members = [
        (f"{i}-{name}", bytes([i + 1]) * size)
        for i, (name, size) in enumerate(zip(NAMES + NAMES[:2], sizes, strict=True))
    ]
    with TarWriter(str(tmp_path / "lhotse.tar"), shard_size=None) as w:
        for name, data in members:
            w.write(name, io.BytesIO(data))
    with TarMemberWriter(str(tmp_path / "ours.tar")) as w:
        for name, data in members:
            w.write(name, data)
    ours = (tmp_path / "ours.tar").read_bytes()
    assert ours == (tmp_path / "lhotse.tar").read_bytes()
    assert len(ours) % tarfile.RECORDSIZE == 0
    with tarfile.open(tmp_path / "ours.tar") as t:
        assert [(m.name, t.extractfile(m).read()) for m in t.getmembers()] == members


def test_an_empty_archive_is_a_valid_empty_tar(tmp_path):
    TarMemberWriter(str(tmp_path / "ours.tar")).close()
    tarfile.open(tmp_path / "std.tar", "w").close()
    assert (tmp_path / "ours.tar").read_bytes() == (tmp_path / "std.tar").read_bytes()
    with tarfile.open(tmp_path / "ours.tar") as t:
        assert t.getmembers() == []


def test_a_demo_shard_equals_one_written_through_lhotses_writers(demo_shards, with_context, tmp_path):
    """Every shard of the demo: cuts.jsonl and both audio tars equal lhotse's writers' output for the
    same records and the same (already encoded) audio bytes."""
    out, plan, _, _ = demo_shards
    files, written = DatasetFiles(str(out)), 0
    for s in range(plan["num_shards"]):
        shard = files.shard(s)
        (lines,) = read_job_inputs(files.shar_input(shard_key(s), 1)).values()
        records = [json.loads(line) for line in lines]
        with tarfile.open(shard.target) as t:
            target = {m.name: t.extractfile(m).read() for m in t.getmembers()}
        with tarfile.open(shard.context) as t:
            context = {m.name: t.extractfile(m).read() for m in t.getmembers()}
        with (
            JsonlShardWriter(str(tmp_path / f"cuts{s}.jsonl"), shard_size=None) as cuts_w,
            LhotseAudioTar(str(tmp_path / f"target{s}.tar"), shard_size=None, format="flac") as target_w,
            LhotseAudioTar(str(tmp_path / f"context{s}.tar"), shard_size=None, format="flac") as context_w,
        ):
            for r in records:
                cut = lhotse_cut(r)
                for writer, members, segment, duration in (
                    (target_w, target, cut.id, r["duration"]),
                    (
                        context_w,
                        context,
                        segment_id(
                            r["context_audio_filepath"],
                            r["context_audio_offset"],
                            r["context_audio_duration"],
                        ),
                        r["context_audio_duration"],
                    ),
                ):
                    meta = json.loads(members[f"{cut.id}.json"])
                    recording = Recording(
                        id=segment,
                        sources=[AudioSource(type="file", channels=[0], source="")],
                        sampling_rate=meta["sampling_rate"],
                        num_samples=meta["num_samples"],
                        duration=duration,
                    )
                    writer.write_encoded(cut.id, members[f"{cut.id}.flac"], recording)
                cuts_w.write(cut)
        assert len(target) == len(context) == 2 * len(records) > 0
        written += len(records)
        assert Path(shard.cuts).read_bytes() == (tmp_path / f"cuts{s}.jsonl").read_bytes()  # (indexed: plain)
        assert Path(shard.target).read_bytes() == (tmp_path / f"target{s}.tar").read_bytes()
        assert Path(shard.context).read_bytes() == (tmp_path / f"context{s}.tar").read_bytes()
    assert written == 56
