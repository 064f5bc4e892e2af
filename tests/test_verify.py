"""sharflow.verify.dataset on real shards and codes of the demo corpus, whole and damaged."""

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharflow.codes.merge import merge_codes_stats
from sharflow.core.errors import SharflowError
from sharflow.core.layout import DatasetFiles
from sharflow.core.shar_index import index_path
from sharflow.dataset.catalog import build_catalog
from sharflow.verify.dataset import verify_dataset
from testkit import FIELDS, assert_informative_codes

SHARDS = (0, 1)  # the `coded` fixture encodes demo shards 0 and 1


@pytest.fixture
def whole(demo_shards, coded, tmp_path):
    """A two-shard dataset with every field (codes of codec "tiny"), its plan and stats."""
    shards_dir, _, shard_stats, _ = demo_shards
    codes_dir, _ = coded
    shar = tmp_path / "shar"
    source = DatasetFiles(str(shards_dir))
    for s in SHARDS:
        files = source.shard(s)
        for field, path in zip(FIELDS, (files.cuts, files.target, files.context), strict=True):
            (shar / field).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, shar / field)
            shutil.copy(index_path(path), shar / field)
    shutil.copytree(codes_dir / "shar" / "codes_tiny", shar / "codes_tiny")
    stats = [json.loads(Path(shard_stats[s]).read_text()) for s in SHARDS]
    (tmp_path / "plan.json").write_text(json.dumps({"num_shards": len(SHARDS), "indexed": True}))
    (tmp_path / "shar_stats.json").write_text(
        json.dumps(
            {
                "cuts": sum(s["cuts"] for s in stats),
                "hours": round(sum(s["target_seconds"] for s in stats) / 3600, 6),
            }
        )
    )
    merge_codes_stats(
        [DatasetFiles(str(codes_dir)).codes("tiny", s).stats for s in SHARDS],
        str(tmp_path / "codes_tiny.json"),
    )
    build_catalog(
        "demo",
        fragments=[source.shard(s).catalog for s in SHARDS],
        plan=str(tmp_path / "plan.json"),
        codes_stats={"tiny": str(tmp_path / "codes_tiny.json")},
        out=str(tmp_path / "catalog.parquet"),
    )
    return tmp_path


def verify(root, workers=1, out="verify.json"):
    return verify_dataset(
        "demo",
        shar_dir=str(root / "shar"),
        plan=str(root / "plan.json"),
        shar_stats=str(root / "shar_stats.json"),
        codes_stats={"tiny": str(root / "codes_tiny.json")},
        catalog=str(root / "catalog.parquet"),
        out=str(root / out),
        workers=workers,
    )


def fails(root, *expected):
    with pytest.raises(SharflowError) as err:
        verify(root)
    message = str(err.value)
    for text in expected:
        assert text in message, message
    assert not (root / "verify.json").exists()
    return message


def test_whole_dataset_verifies_the_same_with_any_worker_count(whole):
    summary = verify(whole)
    assert summary["ok"] and summary["shards"] == 2 and summary["cuts"] == 32
    assert summary["fields"] == [
        "cuts",
        "target_audio",
        "context_audio",
        "target_codes[tiny]",
        "context_codes[tiny]",
    ]
    assert summary["codec_frames"]["target_codes[tiny]"] > 0
    assert summary["catalog_rows"] == 32
    assert summary["indexed"] and summary["indexes"] == 2 * 5  # every file of both shards, each matching
    catalog = pd.read_parquet(whole / "catalog.parquet")
    assert catalog["frames_tiny"].sum() == summary["codec_frames"]["target_codes[tiny]"]
    assert catalog["context_frames_tiny"].sum() == summary["codec_frames"]["context_codes[tiny]"]
    assert catalog["frames_tiny"].nunique() > 10  # the frames carry each cut's own length
    verify(whole, workers=2, out="verify2.json")
    assert (whole / "verify.json").read_bytes() == (whole / "verify2.json").read_bytes()


def test_truncated_tar_is_named(whole):
    tar = whole / "shar" / "target_audio" / "recording.000001.tar"
    tar.write_bytes(tar.read_bytes()[: tar.stat().st_size // 2])
    fails(whole, "dataset demo, field target_audio, shard 1", str(tar))


def test_corrupt_audio_member_names_the_cut(whole):
    tar = whole / "shar" / "context_audio" / "recording.000000.tar"
    with tarfile.open(tar) as t:
        member = t.getmembers()[2]  # the second cut's audio
    cut = member.name.rsplit(".", 1)[0]
    with open(tar, "r+b") as f:
        f.seek(member.offset_data + member.size // 2)
        f.write(b"\0" * 300)
    fails(whole, f"field context_audio, shard 0, cut {cut}: audio does not decode")


def test_cuts_out_of_order_with_the_audio(whole):
    path = whole / "shar" / "cuts" / "cuts.000000.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    path.write_bytes(b"".join(lines))
    fails(whole, "field target_audio, shard 0", "out of order")


def test_an_index_missing_or_not_its_files_is_named(whole):
    cuts = whole / "shar" / "cuts" / "cuts.000001.jsonl"
    codes = whole / "shar" / "codes_tiny" / "context_codes" / "codes.000000.tar"
    held = Path(index_path(codes)).read_bytes()
    assert held != Path(index_path(cuts)).read_bytes() and len(set(np.frombuffer(held, "<u8"))) == 17
    Path(index_path(codes)).unlink()
    fails(whole, "field context_codes[tiny]: 1 of 2 planned shards' indexes missing, first shard 0")
    Path(index_path(codes)).write_bytes(
        held[:-8] + (int.from_bytes(held[-8:], "little") + 512).to_bytes(8, "little")
    )
    Path(index_path(cuts)).write_bytes(Path(index_path(cuts)).read_bytes()[8:])  # one entry short
    fails(
        whole,
        f"field context_codes[tiny], shard 0: index: {index_path(codes)} does not match codes.000000.tar",
        f"field cuts, shard 1: index: {index_path(cuts)} does not match cuts.000001.jsonl (15 entries held,",
    )


def read_codes_tar(path):
    """[(cut id, codes, manifest)] of a codes tar."""
    with tarfile.open(path) as t:
        members = t.getmembers()
        return [
            (
                meta.name[:-5],
                np.load(io.BytesIO(t.extractfile(data).read())),
                json.loads(t.extractfile(meta).read()),
            )
            for data, meta in zip(members[0::2], members[1::2], strict=True)
        ]


def rewrite_codes_tar(path, entries):
    from lhotse.array import Array, TemporalArray
    from lhotse.shar.writers import ArrayTarWriter

    path.unlink()
    with ArrayTarWriter(str(path), shard_size=None, compression="numpy") as writer:
        for key, array, m in entries:
            writer.write(
                key,
                array,
                TemporalArray(
                    array=Array(
                        storage_type="shar", storage_path="", storage_key="", shape=list(array.shape)
                    ),
                    temporal_dim=-1,
                    frame_shift=m["frame_shift"],
                    start=0,
                ),
            )


def test_codes_of_the_wrong_length_are_named(whole):
    path = whole / "shar" / "codes_tiny" / "target_codes" / "codes.000001.tar"
    entries = read_codes_tar(path)
    cid, codes, manifest = entries[3]
    entries[3] = (cid, codes[:, :-1], manifest)  # one frame short
    rewrite_codes_tar(path, entries)
    fails(whole, f"field target_codes[tiny], shard 1, cut {cid}: codes shape")


def test_a_codebook_with_one_value_is_warned_about_and_counted(whole, caplog):
    path = whole / "shar" / "codes_tiny" / "context_codes" / "codes.000001.tar"
    entries = read_codes_tar(path)
    assert_informative_codes([codes for _, codes, _ in entries], distinct_arrays=False, min_distinct=32)
    assert verify(whole)["shards_with_constant_codebooks"] == {
        "target_codes[tiny]": 0,
        "context_codes[tiny]": 0,
    }
    # what an untrained codec writes: codebook 2 holds 1204 everywhere (FSQ's middle level), the rest vary
    for _, codes, _ in entries:
        codes[2] = 1204
    rewrite_codes_tar(path, entries)
    summary = verify(whole, out="again.json")
    assert summary["ok"] and summary["shards_with_constant_codebooks"] == {
        "target_codes[tiny]": 0,
        "context_codes[tiny]": 1,
    }
    assert "field context_codes[tiny], shard 1: codebook(s) [2] hold one value in every frame" in caplog.text


def test_missing_and_stray_files_and_wrong_totals(whole):
    (whole / "shar" / "codes_tiny" / "context_codes" / "codes.000001.tar").unlink()
    (whole / "shar" / "target_audio" / "recording.000001.tar.tmp").write_bytes(b"partial")
    message = fails(
        whole,
        "field context_codes[tiny]: 1 of 2 planned shards missing, first shard 1",
        "field target_audio: stray file",
    )
    assert "Delete the named shard files and rerun snakemake" in message


def test_totals_must_match_the_stage_stats(whole):
    stats = json.loads((whole / "shar_stats.json").read_text())
    (whole / "shar_stats.json").write_text(json.dumps({**stats, "cuts": stats["cuts"] + 1}))
    fails(whole, f"32 cuts in the shards, the shar stats say {stats['cuts'] + 1}")


def test_audio_that_disagrees_with_the_cut_duration_is_named(whole):
    path = whole / "shar" / "cuts" / "cuts.000001.jsonl"
    cuts = [json.loads(line) for line in path.read_bytes().splitlines()]
    cuts[2]["duration"] = round(cuts[2]["duration"] + 0.01, 6)  # the audio stays as it was
    cuts[5]["supervisions"][0]["custom"]["context_audio_duration"] += 0.01
    path.write_bytes(b"".join(json.dumps(c).encode() + b"\n" for c in cuts))
    message = fails(
        whole,
        f"field target_audio, shard 1, cut {cuts[2]['id']}:",
        f"field context_audio, shard 1, cut {cuts[5]['id']}:",
    )
    assert "but the cut says" in message


def rewrite_catalog(root, change):
    table = pd.read_parquet(root / "catalog.parquet")
    table = change(table)
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), root / "catalog.parquet")
    return table


def test_catalog_rows_out_of_order_missing_or_extra_are_named(whole):
    original = pd.read_parquet(whole / "catalog.parquet")
    rewrite_catalog(whole, lambda t: t.iloc[[1, 0, *range(2, len(t))]])
    fails(
        whole,
        f"catalog {whole / 'catalog.parquet'}, shard 0: row 0 of the shard is {original.cut_id[1]!r}",
        "rows must be the cuts in shard order",
    )
    rewrite_catalog(whole, lambda t: original.iloc[:-1])
    fails(whole, "shard 1: row 15 of the shard is 'no row'")
    rewrite_catalog(whole, lambda t: pd.concat([original, original.iloc[:2]]))
    fails(whole, "2 row(s) beyond the 32 cuts of the shards")


def test_catalog_frames_must_equal_the_codes(whole):
    original = pd.read_parquet(whole / "catalog.parquet")

    def one_frame_more(t):
        t = t.copy()
        t.loc[20, "context_frames_tiny"] += 1
        return t

    rewrite_catalog(whole, one_frame_more)
    fails(
        whole,
        f"shard 1, cut {original.cut_id[20]}: catalog context_frames_tiny = "
        f"{original.context_frames_tiny[20] + 1}, the context_codes[tiny] codes have "
        f"{original.context_frames_tiny[20]} frames",
    )


# ---- one damaged-data test per remaining check: each breaks exactly one property of real shards ----


def rewrite_tar(path, change):
    """Rewrite a tar member by member: change(index, name, data) -> (name, data), or None to drop it."""
    with tarfile.open(path) as t:
        members = [(m.name, t.extractfile(m).read()) for m in t.getmembers()]
    path.unlink()
    with tarfile.open(path, "w") as t:
        for i, (name, data) in enumerate(members):
            changed = change(i, name, data)
            if changed is None:
                continue
            info = tarfile.TarInfo(changed[0])
            info.size = len(changed[1])
            t.addfile(info, io.BytesIO(changed[1]))
    return members


def edit_json(data: bytes, **fields) -> bytes:
    return json.dumps({**json.loads(data), **fields}).encode()


def test_members_that_do_not_pair_up_are_named(whole):
    tar = whole / "shar" / "target_audio" / "recording.000000.tar"
    members = rewrite_tar(tar, lambda i, name, data: ("other.json", data) if i == 1 else (name, data))
    fails(whole, "field target_audio, shard 0", f"members {members[0][0]!r}, 'other.json' are not a")
    rewrite_tar(tar, lambda i, name, data: None if i == 1 else (name, data))  # an odd member count
    message = fails(whole, "field target_audio, shard 0: tar does not read", "do not pair up")
    assert "catalog" not in message  # the other shard's catalog rows still line up


def test_a_shard_with_fewer_entries_than_cuts_is_named(whole):
    tar = whole / "shar" / "context_audio" / "recording.000001.tar"
    rewrite_tar(tar, lambda i, name, data: None if i >= 30 else (name, data))  # the last cut's pair
    fails(whole, "field context_audio, shard 1: 15 entries but the cuts file has 16")


def test_audio_whose_manifest_disagrees_with_its_samples_is_named(whole):
    tar = whole / "shar" / "target_audio" / "recording.000001.tar"
    members = rewrite_tar(
        tar,
        lambda i, name, data: (
            (name, edit_json(data, num_samples=json.loads(data)["num_samples"] + 1))
            if i == 9
            else (name, data)
        ),
    )
    cut = members[9][0][: -len(".json")]
    fails(whole, f"field target_audio, shard 1, cut {cut}: decodes to", "manifest declares")


def test_codes_outside_the_codebook_or_not_integers_are_named(whole):
    path = whole / "shar" / "codes_tiny" / "target_codes" / "codes.000000.tar"
    entries = read_codes_tar(path)
    size = json.loads((whole / "codes_tiny.json").read_text())["codebook_size"]
    cid, codes, manifest = entries[4]
    bad = codes.astype(np.int32)
    bad[1, 3] = size  # one code one past the codebook
    entries[4] = (cid, bad, manifest)
    rewrite_codes_tar(path, entries)
    fails(whole, f"field target_codes[tiny], shard 0, cut {cid}: codes outside [0, {size})")
    entries[4] = (cid, codes.astype(np.float32), manifest)
    rewrite_codes_tar(path, entries)
    fails(whole, f"cut {cid}: codes dtype float32 is not an integer type")


def test_codes_manifests_with_a_wrong_shape_or_frame_shift_are_named(whole):
    path = whole / "shar" / "codes_tiny" / "context_codes" / "codes.000001.tar"
    entries = read_codes_tar(path)
    cid, codes, manifest = entries[6]
    entries[6] = (cid, codes, {**manifest, "frame_shift": manifest["frame_shift"] * 2})
    rewrite_codes_tar(path, entries)
    fails(whole, f"field context_codes[tiny], shard 1, cut {cid}: frame_shift {manifest['frame_shift'] * 2}")
    members = rewrite_tar(
        path,
        lambda i, name, data: (
            (name, edit_json(data, array={**json.loads(data)["array"], "shape": [8, 1]}))
            if i == 1
            else (name, data)
        ),
    )
    first = members[1][0][: -len(".json")]
    fails(whole, f"cut {first}: manifest shape [8, 1] differs from the array's")


def test_codes_stats_that_disagree_with_the_shards_are_named(whole):
    stats = json.loads((whole / "codes_tiny.json").read_text())
    (whole / "codes_tiny.json").write_text(json.dumps({**stats, "cuts": stats["cuts"] - 1}))
    fails(
        whole, f"codec tiny: codes stats count {stats['cuts'] - 1} cuts in 2 shards, the shards hold 32 in 2"
    )
