"""Held out means held out, by content: fingerprints, utterance keys, the identity job and the
splits job reading its links (sharflow.identity, sharflow.splits.stage)."""

import io
import itertools
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import yaml

from sharflow.core.errors import SharflowError
from sharflow.core.layout import IdentityCheckFiles, IdentityIndexFiles
from sharflow.core.splits import TRAIN, SplitRules, speaker_identity
from sharflow.identity.fingerprint import Fingerprint, best_offset_count, fingerprint, match
from sharflow.identity.held_out import HeldOut
from sharflow.identity.keys import folded_text, utterance_key
from sharflow.identity.links import (
    DUPLICATE,
    HELD_OUT_REASONS,
    REASONS,
    SAME_CONTENT,
    SAME_UTTERANCE,
    DatasetIdentity,
    MatchRules,
    _first_copies,
    _warn_drifted,
    check_identities,
    index_identities,
    link_identities,
    merge_identities,
)
from sharflow.identity.part import HASH_DTYPE, VoiceEmbedding, run_identity_part
from sharflow.identity.voices import (
    LINKED_SPEAKER,
    NEAR,
    Speaker,
    VoiceRules,
    Voices,
    link_speakers,
    read_decisions,
)
from sharflow.identity.voices import _decide as voices_decide
from sharflow.identity.voices import _rank as voices_rank
from sharflow.io.audio import load_span, span_key
from sharflow.splits.stage import DatasetSplits, assign_splits
from testkit import DEMO, REPO, identity_part, prepare_demo, read_jsonl, run_identity, write_jsonl

RULES = MatchRules()
DEMO_SPLITS = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["datasets"]["demo"]["splits"]
MANIFEST = [json.loads(x) for x in (DEMO / "manifest.json").read_text().splitlines()]


def _encoded(x, rate, fmt, subtype, to=None):
    if to and to != rate:
        x, rate = soxr.resample(x, rate, to).astype(np.float32), to
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype)
    buf.seek(0)
    return sf.read(buf, dtype="float32")


# What copies of a corpus go through (the list): rate, codec, gain, trim and pad.
COPIES = {
    "16k": lambda x, r: (x, r),
    "22.05k": lambda x, r: (soxr.resample(x, r, 22050).astype(np.float32), 22050),
    "24k": lambda x, r: (soxr.resample(x, r, 24000).astype(np.float32), 24000),
    "44.1k": lambda x, r: (soxr.resample(x, r, 44100).astype(np.float32), 44100),
    "mp3": lambda x, r: _encoded(x, r, "MP3", "MPEG_LAYER_III"),
    "opus": lambda x, r: _encoded(x, r, "OGG", "OPUS", to=48000),
    "+6dB": lambda x, r: (np.clip(x * 2.0, -1.0, 1.0), r),
    "-6dB": lambda x, r: (x * 0.5, r),
    "trim300": lambda x, r: (x[int(0.3 * r) :], r),
    "pad300": lambda x, r: (np.concatenate([np.zeros(int(0.3 * r), np.float32), x]), r),
    "trim_end300": lambda x, r: (x[: -int(0.3 * r)], r),
}


def demo_audio(record):
    return load_span(
        str(DEMO / "audio" / record["audio_filepath"]), record.get("offset", 0.0), record["duration"]
    )


def key(record) -> str:
    """A demo record's name: its file and offset (some demo files hold two utterances)."""
    return f"{record['audio_filepath']}@{record.get('offset', 0.0)}"


def held_out(record) -> bool:
    rules = SplitRules.from_config(DEMO_SPLITS)
    path = str(DEMO / "audio" / record["audio_filepath"])
    return (
        rules.split(record["speaker"], record["audio_filepath"], span_key(path, 0.0, record["duration"]))
        != TRAIN
    )


@pytest.fixture(scope="module")
def prints():
    return {key(r): fingerprint(*demo_audio(r)) for r in MANIFEST}


def is_match(a, b) -> bool:
    """The identity job's rule, through its index (HeldOut.best) rather than match()."""
    held = HeldOut()
    held.add("x", {"audio_filepath": "a", "offset": 0.0, "duration": 1.0, "span": "a"}, "dev_seen", _array(a))
    held.freeze()
    return held.best(_array(b), RULES) is not None


def _array(fp):
    out = np.zeros(len(fp) if fp.usable else 0, HASH_DTYPE)
    if fp.usable:
        out["hash"], out["time"] = fp.hashes, fp.times
    return out


def test_every_copy_of_a_held_out_utterance_matches_and_no_two_distinct_utterances_do(prints):
    held = [r for r in MANIFEST if held_out(r)]
    assert len(held) == 30 and all(len(prints[key(r)]) >= 80 for r in MANIFEST)
    index = HeldOut()  # every demo utterance: a copy's lookup finds its own among 56, scored by its pairs
    for r in MANIFEST:
        entry = {"audio_filepath": key(r), "offset": 0.0, "duration": 1.0, "span": key(r)}
        index.add("demo", entry, "dev_seen", _array(prints[key(r)]))
    index.freeze()
    worst = {}
    for r in held:
        x, rate = demo_audio(r)
        for name, copy in COPIES.items():
            fp = fingerprint(*copy(x, rate))
            score = match(prints[key(r)], fp)
            worst[name] = min(worst.get(name, 1.0), score)
            assert index.best(_array(fp), RULES)[:2] == (MANIFEST.index(r), score), (key(r), name)
    assert min(worst.values()) >= 0.2, worst
    scores = {
        (a, b): match(prints[a], prints[b]) for a, b in itertools.combinations([key(r) for r in MANIFEST], 2)
    }
    assert len(scores) == 56 * 55 // 2 and max(scores.values()) < RULES.min_score / 2, max(scores.values())
    assert not any(is_match(prints[a], prints[b]) for (a, b), s in scores.items() if s > 0.02)
    # among them, one voice's sentence inside another voice's longer clip (the same text, read twice)
    text = {key(r): folded_text(r["text"]) for r in MANIFEST}
    speaker = {key(r): r["speaker"] for r in MANIFEST}
    same_sentence = [
        (a, b) for a, b in scores if speaker[a] != speaker[b] and (text[a] in text[b] or text[b] in text[a])
    ]
    assert len(same_sentence) >= 20 and max(scores[p] for p in same_sentence) < RULES.min_score / 2


def test_the_match_thresholds_decide_what_is_one_content(prints):
    """An Opus copy of a held-out utterance (scores ~0.3) is one content by default, not when
    identity.min_score asks for 0.9 nor when identity.min_matched asks for more hashes than it has."""
    record = next(r for r in MANIFEST if held_out(r))
    copy = fingerprint(*COPIES["opus"](*demo_audio(record)))
    original = prints[key(record)]
    held = HeldOut()
    held.add(
        "x",
        {"audio_filepath": "a", "offset": 0.0, "duration": 1.0, "span": "a"},
        "dev_seen",
        _array(original),
    )
    held.freeze()
    owner, score, matched = held.best(_array(copy), MatchRules())
    assert owner == 0 and 0.15 < score < 0.9 and matched >= 8
    assert held.best(_array(copy), MatchRules(min_score=0.9)) is None
    assert held.best(_array(copy), MatchRules(min_matched=matched + 1)) is None
    assert held.best(_array(copy), MatchRules(min_matched=matched)) is not None


def test_any_parts_and_workers_give_the_same_fingerprints_and_links(tmp_path):
    """The demo fingerprinted and embedded as 1 part by 1 worker and as 2 parts by 2 workers, its train
    records checked in 1 and in 3 identity check parts: the same entries (less where each starts in
    its part's file), the same hashes and voices (bytes), byte-identical links and speaker decisions,
    the same stats (but their seconds)."""
    records, root, _ = demo_dataset(tmp_path)
    layouts = {}
    for parts, workers in ((1, 1), (2, 2)):
        out = tmp_path / f"p{parts}w{workers}"
        files = []
        for part in range(parts):
            prefix = out / f"part-{part}"
            run_identity_part(
                part,
                records=str(records),
                parts=parts,
                audio_root=str(root),
                out_records=f"{prefix}.jsonl",
                out_hashes=f"{prefix}.npy",
                out_stats=f"{prefix}.stats.json",
                out_voices=f"{prefix}.voices.npy",
                workers=workers,
                voices=VoiceEmbedding(),
            )
            files.append([f"{prefix}.jsonl", f"{prefix}.npy", f"{prefix}.voices.npy"])
        assert not list(out.glob(".*"))  # no scratch left (the hashes are copied in under a header)
        entries = [{k: v for k, v in e.items() if k != "start"} for f, *_ in files for e in read_jsonl(f)]
        hashes = np.concatenate([np.load(h) for _, h, _ in files])
        voices = b"".join(np.load(v)["voice"].tobytes() for *_, v in files)
        link_identities(
            {"demo": DatasetIdentity(files, DEMO_SPLITS)},
            rules=MatchRules(),
            out_links=str(out / "links.jsonl"),
            out_stats=str(out / "stats.json"),
            voices=VoiceRules(min_similarity=0.5),  # so that pairs are linked and others decided not to be
            decisions=str(out / "decisions.jsonl"),
            check_parts={1: 1, 2: 3}[parts],
        )
        links = (out / "links.jsonl").read_bytes() + (out / "decisions.jsonl").read_bytes()
        layouts[parts] = (entries, hashes, voices, links, files)
    (e1, h1, v1, l1, _), (e2, h2, v2, l2, f2) = layouts[1], layouts[2]
    s1, s2 = (json.loads((tmp_path / f"p{p}w{p}" / "stats.json").read_text()) for p in (1, 2))
    assert s1.pop("seconds") > 0 and s2.pop("seconds") > 0 and s1 == s2 and s1["links"] > 0
    assert len(f2) == 2 and all(read_jsonl(f) for f, *_ in f2)  # two parts, both hold records
    assert len(e1) == 56 and len({e["digest"] for e in e1}) == 56 and e1 == e2
    assert len(h1) > 56 * 80 and np.array_equal(h1, h2) and l1 == l2
    # the decisions as the next run reads them, one row a line; the stats the report and card read
    lines = (tmp_path / "p1w1" / "decisions.jsonl").read_text(encoding="utf-8").splitlines()
    decided = read_decisions(str(tmp_path / "p1w1" / "decisions.jsonl"))
    assert [json.loads(x)["pair"] for x in lines] == sorted(decided) and len(decided) > 1
    stats = json.loads((tmp_path / "p1w1" / "stats.json").read_text())
    assert set(stats["by_reason"]) == set(REASONS)
    assert sum(stats["by_reason"][r] for r in HELD_OUT_REASONS) == stats["links"]
    # a pair's hash and time, a triplet's key and pair, a record's size
    index_bytes = 8 * (stats["held_out_hashes"] + stats["held_out_triplets"] + stats["held_out"])
    assert 0 < stats["index_mb"] == round(index_bytes / 1e6, 3) < 1
    embeddings = np.frombuffer(v1, np.float32).reshape(56, -1)
    assert len({row.tobytes() for row in embeddings}) == 56 and v1 == v2  # 56 distinct voices, same bytes
    assert b'"how": "voice"' in l1 and b'"how": "not_linked"' in l1


def test_the_identity_merge_refuses_check_parts_out_of_order_or_missing(tmp_path):
    """Two check parts of the demo's train records, each an equal run of them (the second's first is
    the first's end); merged in order they give one job's links; swapped, or with one missing, the
    merge stops with what to do."""
    records, root, _ = demo_dataset(tmp_path)
    _, files = identity_part(tmp_path / "part", records, root)
    datasets = {"demo": DatasetIdentity([files[:2]], DEMO_SPLITS)}
    index = IdentityIndexFiles.under(tmp_path)
    summary = index_identities(datasets, rules=MatchRules(), out=index)
    train = sum(summary["train_checked"].values())
    checks = [IdentityCheckFiles(str(tmp_path / f"{p}.jsonl"), str(tmp_path / f"{p}.json")) for p in range(2)]
    parts = [
        check_identities(datasets, index=index, part=p, parts=2, rules=MatchRules(), out=out)
        for p, out in enumerate(checks)
    ]
    assert [(p["first"], p["records"]) for p in parts] == [(0, train // 2), (train // 2, train - train // 2)]

    def merge(files):
        out = tmp_path / "merged"
        return merge_identities(
            index.summary,
            files,
            rules=MatchRules(),
            out_links=str(out / "links.jsonl"),
            out_stats=str(out / "s.json"),
        )

    merged = merge(checks)
    assert merged["train_checked"] == {"demo": train} and merged["held_out"] == summary["held_out"] > 0
    with pytest.raises(SharflowError) as error:
        merge(checks[::-1])
    assert str(error.value) == (
        f"{checks[1].stats}: identity part 1 starts at train record {train // 2}, not 0: the identity "
        "parts are out of date; rerun with --forcerun identity_check"
    )
    with pytest.raises(SharflowError, match=f"checked {train // 2} train records of {train}"):
        merge(checks[:1])
    # an index an older sharflow wrote (pairs sorted by hash, no triplets): the check says what to do
    np.savez(
        index.index, hashes=np.zeros(3, np.uint32), owners=np.zeros(3, np.int32), times=np.zeros(3, np.int32)
    )
    with pytest.raises(SharflowError) as error:
        check_identities(datasets, index=index, part=0, parts=1, rules=MatchRules(), out=checks[0])
    assert str(error.value) == (
        f"{index.index} is an identity index an older sharflow wrote (it has no ['sizes', 'triplets']): "
        "rerun with --forcerun identity_index to index the held-out records again"
    )


def test_silence_and_clips_too_short_to_fingerprint_never_match(prints):
    x, rate = demo_audio(MANIFEST[0])
    silence = fingerprint(np.zeros(3 * rate, np.float32), rate)
    blip = fingerprint(x[int(1.0 * rate) : int(1.1 * rate)], rate)
    assert len(silence) == 0 and not blip.usable
    assert match(silence, silence) == 0.0 and match(blip, prints[key(MANIFEST[0])]) == 0.0
    assert not is_match(blip, fingerprint(x, rate))
    one_second = fingerprint(x[int(1.0 * rate) : int(2.0 * rate)], rate)
    assert one_second.usable and is_match(
        one_second, fingerprint(x, rate)
    )  # a segment of a clip: scored on the shorter


def test_an_utterance_is_a_speaker_and_a_folded_text_long_enough_to_say_so():
    text = "The birch canoe slid on the smooth planks."
    assert utterance_key("awb", text) == utterance_key("awb", "the BIRCH canoe -- slid on the smooth planks")
    assert utterance_key("awb", text) != utterance_key("rms", text)  # two voices, one sentence
    assert utterance_key("awb", text) != utterance_key("awb", text + " Twice.")
    assert utterance_key("awb", "Yes.") is None and utterance_key("awb", "Thank you very much.") is None
    assert utterance_key("awb", None) is None
    twenty = "abcde fghij klmno pqrst"  # 20 letters in 4 words: just long enough
    assert len(utterance_key("awb", twenty)) == 24 and utterance_key("awb", twenty[:-1]) is None
    assert utterance_key("awb", "abcdefgh ijklmnop qrstuvwx") is None  # 3 words


# ---- the identity job and the splits job --------------------------------------------------------


def make_dataset(tmp, name, rows):
    """A prepared dataset from rows (speaker, rel path, text, (audio, rate) or a file to copy), or of
    demo files (every audio None: the root is the demo's): (prepared records path, audio root, count)."""
    demo_files = all(audio is None for *_, audio in rows)
    root = DEMO / "audio" if demo_files else tmp / name / "audio"
    manifest = []
    for speaker, rel, text, audio in rows:
        if not demo_files:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            subtype = {"mp3": "MPEG_LAYER_III", "ogg": "OPUS"}.get(rel.rsplit(".", 1)[-1], "PCM_16")
            if isinstance(audio, Path):  # a renamed copy of a file, byte for byte
                shutil.copyfile(audio, root / rel)
            else:
                sf.write(root / rel, *audio, subtype=subtype)
        info = sf.info(str(root / rel))
        duration = round(info.frames / info.samplerate, 3)
        manifest.append({"audio_filepath": rel, "duration": duration, "text": text, "speaker": speaker})
    prep = prepare_demo(tmp / name, write_jsonl(tmp / name / "manifest.json", manifest), root)
    records = prep / "prepared.jsonl"
    assert len(read_jsonl(records)) == len(rows), read_jsonl(prep / "stats.json")
    return records, root, len(rows)


def demo_dataset(tmp):
    """The demo corpus, prepared: (records, audio root, count)."""
    return prepare_demo(tmp / "demo") / "prepared.jsonl", DEMO / "audio", len(MANIFEST)


def test_no_copy_of_held_out_audio_reaches_train_and_copies_of_train_audio_lose_nothing(tmp_path):
    """A dataset of renamed copies of the demo's held-out utterances (every kind of copy, under their
    own speaker ids and under others), and one of copies of its train utterances."""
    demo = demo_dataset(tmp_path)
    names = list(COPIES)
    leaks, clean = [], []
    for i, r in enumerate(MANIFEST):
        x, rate = demo_audio(r)
        kind = names[i % len(names)]
        audio = COPIES[kind](x, rate)
        suffix = {"mp3": "mp3", "opus": "ogg"}.get(kind, "flac")
        for j, speaker in enumerate((r["speaker"], f"other{i}")):
            row = (
                speaker,
                f"c/{i:03d}_{j}_{kind}.{suffix}",
                r["text"] if j == 0 else f"copy number {i}",
                audio,
            )
            (leaks if held_out(r) else clean).append(row)
    assert (
        len(leaks) == 60
        and len(clean) == 52
        and {row[1].rsplit(".", 1)[-1] for row in leaks} == {"flac", "mp3", "ogg"}
    )
    identity, out = run_identity(
        tmp_path,
        {
            "demo": (*demo, DEMO_SPLITS),
            "leaks": (*make_dataset(tmp_path, "leaks", leaks), {}),
            "clean": (*make_dataset(tmp_path, "clean", clean), {}),
        },
    )
    stats, records, rejects = out["leaks"]
    assert records == [] and stats["rejected"] == {SAME_CONTENT: 60}, stats["rejected"]
    # the identity stats show the first links of each reason, and the rules they were found with
    assert identity["rules"] == {"min_score": MatchRules().min_score, "min_matched": MatchRules().min_matched}
    examples = identity["examples"][SAME_CONTENT]
    assert len(examples) == 5 and all(
        e["reason"] == SAME_CONTENT and e["dataset"] == "leaks" for e in examples
    )
    links = read_jsonl(tmp_path / "identity" / "links.jsonl")
    scores = [row["score"] for row in links if row["reason"] == SAME_CONTENT]
    assert len(scores) == 60 and all(0 < s <= 1 and s == round(s, 4) for s in scores) and len(set(scores)) > 5
    assert all(" of dataset demo (score " in r["detail"] for r in rejects)
    matched = {json.loads(r["original"])["audio_filepath"]: r["detail"] for r in rejects}
    assert len(matched) == 60
    # the unseen speakers' copies, under other ids, are gone too
    assert any("dev_unseen kal/" in d for d in matched.values()) and any(
        "test_unseen us_m3/" in d for d in matched.values()
    )
    stats, records, _ = out["clean"]
    assert stats["rejected_total"] == 0 and len(records) == 52  # no over-rejection
    # every record carries its identity fields (the catalog's columns), varied
    every = [r for name in out for r in out[name][1]]
    assert all(r["fingerprint_hashes"] >= 0 and len(r["audio_digest"]) == 16 for r in every)
    assert (
        len({r["audio_digest"] for r in every}) > 70  # copies under two speaker ids share one
        and len({r["fingerprint_hashes"] for r in every}) > 20
    )
    assert out["demo"][0]["rejected_total"] == 0 and identity["by_dataset_pair"] == {"leaks <- demo": 60}


@pytest.mark.parametrize("speaker_ids", ["shared", "own"])
def test_the_same_speaker_and_text_is_one_utterance_and_another_voice_reading_it_is_not(
    tmp_path, speaker_ids
):
    """awb_001 held out; 'again' has awb reading its text in another recording (awb_002's audio),
    and rms reading it (rms_003's audio): the first is the held-out utterance, the second is not.
    With speaker_ids: own, 'again''s awb is another person: neither is."""
    by_path = {r["audio_filepath"]: r for r in MANIFEST}
    demo = demo_dataset(tmp_path)
    text = by_path["awb/awb_001.flac"]["text"]
    again = make_dataset(
        tmp_path,
        "again",
        [("awb", "awb/awb_002.flac", text, None), ("rms", "rms/rms_003.flac", text, None)],
    )
    # "again" does not hold out what demo holds out: its own hash rules would; test the link alone
    _, out = run_identity(
        tmp_path,
        {
            "demo": (*demo, {"dev_seen": {"utterances": ["awb/awb_001.flac"]}}),
            "again": (*again, {}, speaker_ids == "own"),
        },
    )
    stats, records, rejects = out["again"]
    if speaker_ids == "own":
        assert stats["rejected_total"] == 0 and len(records) == 2
        return
    assert stats["rejected"] == {SAME_UTTERANCE: 1} and records[0]["speaker"].endswith("rms |")
    assert "dev_seen awb/awb_001.flac" in rejects[0]["detail"]


@pytest.mark.parametrize("action", ["keep", "drop", "mark"])
def test_exact_duplicates_within_train_are_kept_dropped_or_marked(tmp_path, action):
    """Byte copies of six demo train files under new names, one of them twice: five duplicates in
    train, found by their samples; no held-out rule touches them."""
    train = [r for r in MANIFEST if not held_out(r) and "offset" not in r][:6]
    rows = [
        (r["speaker"], f"d/{i}.flac", r["text"], DEMO / "audio" / r["audio_filepath"])
        for i, r in enumerate(train)
    ]
    rows.append(
        (train[0]["speaker"], "d/again.flac", train[0]["text"], DEMO / "audio" / train[0]["audio_filepath"])
    )
    identity, out = run_identity(
        tmp_path,
        {"demo": (*demo_dataset(tmp_path), DEMO_SPLITS), "dups": (*make_dataset(tmp_path, "dups", rows), {})},
        MatchRules(train_duplicates=action),
    )
    assert identity["train_duplicates"] == {"found": 7, "action": action} and identity["links"] == 0
    stats, records, rejects = out["dups"]
    first = {r["audio_digest"] for r in out["demo"][1]}
    if action == "drop":
        assert stats["rejected"] == {DUPLICATE: 7} and records == []
        assert all("train " in r["detail"] and "of dataset demo" in r["detail"] for r in rejects)
    else:
        assert (
            stats["rejected_total"] == 0
            and len(records) == 7
            and {r["audio_digest"] for r in records} <= first
        )
        marks = [r.get("duplicate_of") for r in records]
        if action == "mark":
            assert all(m and m.startswith("demo:") for m in marks) and stats["marked_duplicates"] == 7
        else:
            assert not any(marks)


def test_a_speaker_id_names_one_person_across_datasets_unless_a_dataset_owns_its_ids():
    """Unseen speakers by hash: the same id in two datasets gets one decision (shared), or one each
    (own: the id within its dataset), while listed speakers stay listed."""
    rules = SplitRules.from_config({"seed": 5, "dev_unseen": {"fraction": 0.5, "speakers": ["7"]}})
    ids = [str(i) for i in range(40)]
    shared = [rules.speaker_split(i, speaker_identity("b", i, False)) for i in ids]
    own = [rules.speaker_split(i, speaker_identity("b", i, True)) for i in ids]
    assert shared == [rules.speaker_split(i) for i in ids]  # shared: the id is the person
    assert 5 < sum(a != b for a, b in zip(shared, own, strict=True)) < 35  # own: decided anew
    assert shared[7] == own[7] == "dev_unseen"  # listed by its id in its own dataset


def test_two_segments_of_one_file_are_two_utterances_and_a_span_held_out_twice_stays(tmp_path):
    a, b = (demo_audio(r)[0] for r in MANIFEST[:2])
    n = min(len(a), len(b))
    long = (np.concatenate([a[:n], b[:n]]), 16000)
    seconds = round(n / 16000, 3)
    rows = [("awb", "long.flac", MANIFEST[0]["text"], long)]
    ds = make_dataset(tmp_path, "long", rows)
    # two segments (offsets 0 and n, one duration) of the file: find a seed that holds out one only
    base = json.loads(ds[0].read_text())
    segments = [
        {**base, "offset": off, "duration": seconds, "text": t}
        for off, t in ((0.0, MANIFEST[0]["text"]), (seconds, MANIFEST[1]["text"]))
    ]
    write_jsonl(ds[0], segments)
    path = str(ds[1] / "long.flac")

    def splits(seed):
        rules = SplitRules.from_config({"seed": seed, "dev_seen": {"fraction": 0.5}})
        return [rules.split("awb", "long.flac", span_key(path, s["offset"], s["duration"])) for s in segments]

    seed = next(s for s in range(100) if sorted(splits(s)) == ["dev_seen", TRAIN])
    other = make_dataset(tmp_path, "other", rows)
    write_jsonl(other[0], segments)
    both = {"seed": seed, "dev_seen": {"fraction": 0.5}}
    _, out = run_identity(tmp_path, {"long": (ds[0], ds[1], 2, both), "other": (other[0], other[1], 2, both)})
    for name in ("long", "other"):
        stats, records, _ = out[name]
        assert stats["rejected_total"] == 0, stats  # the train segment is another utterance
        assert sorted(r["split"] for r in records) == ["dev_seen", TRAIN]  # held out in both: stays


def test_a_split_that_selects_nothing_is_said_and_can_stop_the_run(tmp_path, caplog):
    demo = demo_dataset(tmp_path)
    rules = {"seed": 0, "dev_unseen": {"fraction": 0.01}, "test_seen": {"utterances": ["nowhere.flac"]}}
    assert not any(SplitRules.from_config(rules).speaker_split(s) for s in {r["speaker"] for r in MANIFEST})
    files = {k: str(tmp_path / k) for k in ("records.jsonl", "rejected", "stats.json")}
    kwargs = {
        "links": None,
        "records_in": 56,
        "out_records": files["records.jsonl"],
        "rejected_dir": files["rejected"],
        "stats": files["stats.json"],
    }
    with caplog.at_level(logging.WARNING):
        stats = assign_splits("demo", DatasetSplits(str(demo[0]), str(demo[1]), rules), **kwargs)
    empty = {e["split"]: e for e in stats["empty_splits"]}
    assert set(empty) == {"dev_unseen", "test_seen"} and empty["dev_unseen"]["expected"] == 0.07
    assert (
        "dataset demo: the dev_unseen split is empty (dev_unseen.fraction 0.01 of 7 speakers" in caplog.text
    )
    assert "test_seen.utterances names ['nowhere.flac']" in caplog.text
    with pytest.raises(SharflowError, match="dataset demo: the dev_unseen split is empty"):
        assign_splits(
            "demo",
            DatasetSplits(str(demo[0]), str(demo[1]), {**rules, "empty": "error"}),
            **kwargs,
            empty="error",
        )


# ---- speakers linked by voice or id (sharflow.identity.voices) ----------------------------------

OTHER_HALF = {"kal": "k", "us_m3": "m", "gb_f2": "g", "awb": "a"}  # voice -> its id in "more"


def _halves(tmp, ids=OTHER_HALF, demo_ids=None):
    """demo less the last four utterances of four voices, and "more": those utterances (other
    recordings, not copies) under the ids `ids` gives. kal (dev_unseen) and us_m3 (test_unseen) are
    held out in demo; gb_f2 is the voice closest to us_m3 (0.922), awb an ordinary other voice.
    `demo_ids` renames demo's own speakers."""
    order = {id(r): i for s in ids for i, r in enumerate(r for r in MANIFEST if r["speaker"] == s)}
    moved = [r for r in MANIFEST if order.get(id(r), -1) >= 4]
    kept = [r for r in MANIFEST if order.get(id(r), -1) < 4]
    kept = [{**r, "speaker": (demo_ids or {}).get(r["speaker"], r["speaker"])} for r in kept]
    renamed = [{**r, "speaker": ids[r["speaker"]], "text": f"another text {i}"} for i, r in enumerate(moved)]
    out = []
    for name, rows in (("demo", kept), ("more", renamed)):
        prep = prepare_demo(tmp / name, write_jsonl(tmp / name / "manifest.json", rows), DEMO / "audio")
        assert len(read_jsonl(prep / "prepared.jsonl")) == len(rows)
        out.append((prep / "prepared.jsonl", DEMO / "audio", len(rows)))
    assert len(moved) == 16
    return out


def test_an_unseen_speaker_under_another_id_is_linked_by_voice_and_the_closest_other_voice_is_not(tmp_path):
    """The issue's bar: other recordings of the held-out unseen voices, under other ids in another
    dataset, are linked to them and none reaches train; the voice closest to a held-out one (two
    voices of one synthesis engine) and an ordinary voice are not linked and lose nothing."""
    demo, more = _halves(tmp_path)
    identity, out = run_identity(tmp_path, {"demo": (*demo, DEMO_SPLITS), "more": (*more, {}, True)})
    stats, records, rejects = out["more"]
    assert stats["rejected"] == {LINKED_SPEAKER: 8}, stats["rejected"]
    assert (
        sorted({r["speaker"].split("Speaker:")[1].split()[0] for r in records}) == ["a", "g"]
        and len(records) == 8
    )
    assert any(
        "the same person as dev_unseen speaker kal of dataset demo (by voice" in r["detail"] for r in rejects
    )
    assert any("test_unseen speaker us_m3" in r["detail"] for r in rejects)
    speakers = identity["speakers"]
    linked = {
        (p["speaker"]["speaker"], p["held_out"]["speaker"]): p["similarity"] for p in speakers["linked"]
    }
    threshold = VoiceRules().min_similarity
    assert set(linked) == {("k", "kal"), ("m", "us_m3")} and min(linked.values()) >= threshold
    # what the comparison carries: the closest pair not linked is the near voice, well below the links
    closest = speakers["near_misses"][0]
    assert (closest["speaker"]["speaker"], closest["held_out"]["speaker"]) == ("g", "us_m3")
    assert threshold - NEAR <= closest["similarity"] < threshold and not closest["linked"]
    assert out["demo"][0]["rejected_total"] == 0
    assert identity["by_dataset_pair"] == {"more <- demo": 8}
    # the next run reads the decisions this one wrote: a pair decided not linked (by hand, here)
    # stays so, flagged as drifted, and its speaker's records stay in train
    decisions = tmp_path / "identity" / "speaker_decisions.jsonl"
    rows = read_jsonl(decisions)
    for row in rows:
        if (row["speaker"]["speaker"], row["held_out"]["speaker"]) == ("k", "kal"):
            row.update(linked=False, how="not_linked")
    write_jsonl(decisions, rows)
    _, out = run_identity(tmp_path, {"demo": (*demo, DEMO_SPLITS), "more": (*more, {}, True)})
    assert out["more"][0]["rejected"] == {LINKED_SPEAKER: 4}
    kept = next(r for r in read_jsonl(decisions) if r["speaker"]["speaker"] == "k")
    assert (kept["linked"], kept["how"], kept["drifted"]) == (False, "not_linked", True)
    # identity.voices.enabled: false compares no voices: other ids are other people
    _, off = run_identity(
        tmp_path / "off",
        {"demo": (*demo, DEMO_SPLITS), "more": (*more, {}, True)},
        voices=VoiceRules(enabled=False),
    )
    assert off["more"][0]["rejected_total"] == 0 and len(off["more"][1]) == 16


def test_the_same_id_in_datasets_that_share_ids_is_one_person_and_the_config_decides_a_pair(tmp_path):
    """Under their demo ids with shared ids, the moved kal and us_m3 are linked by id (voices off);
    deny keeps a voice link from being made, confirm makes one the voices would not."""
    demo, more = _halves(tmp_path, {v: v for v in OTHER_HALF})
    identity, out = run_identity(
        tmp_path, {"demo": (*demo, DEMO_SPLITS), "more": (*more, {})}, voices=VoiceRules(enabled=False)
    )
    assert out["more"][0]["rejected"] == {LINKED_SPEAKER: 8}
    assert {p["how"] for p in identity["speakers"]["linked"]} == {"id"}
    demo, more = _halves(tmp_path / "own")
    rules = VoiceRules(
        deny=(frozenset(("demo:kal", "more:k")),), confirm=(frozenset(("demo:us_m3", "more:a")),)
    )
    identity, out = run_identity(
        tmp_path / "own", {"demo": (*demo, DEMO_SPLITS), "more": (*more, {}, True)}, voices=rules
    )
    how = {p["speaker"]["speaker"]: (p["how"], p["linked"]) for p in identity["speakers"]["linked"]}
    assert how == {"m": ("voice", True), "a": ("confirmed", True)}, how
    kept = {r["speaker"].split("Speaker:")[1].split()[0] for r in out["more"][1]}
    assert kept == {"k", "g"} and out["more"][0]["rejected"] == {LINKED_SPEAKER: 8}


def test_the_identity_job_holds_out_whom_the_splits_hold_out_where_ids_are_a_datasets_own(tmp_path):
    """A dataset whose speaker ids are its own, its unseen split drawn by fraction: a speaker is drawn by
    who it is (`<dataset>/<id>`), not by its bare id. The identity job indexes as held out exactly the
    records the splits stage puts in held-out splits (for this seed one voice is drawn by who it is and
    three by their bare ids, so a job that drew by the bare id would index more)."""
    demo, more = _halves(tmp_path, {v: v for v in OTHER_HALF})
    block = {"seed": 3, "dev_unseen": {"fraction": 0.5}}
    rules = SplitRules.from_config(block)
    by_who = {s: rules.speaker_split(s, speaker_identity("more", s, True)) for s in OTHER_HALF}
    by_id = {s: rules.speaker_split(s) for s in OTHER_HALF}
    assert sum(map(bool, by_who.values())) == 1 and sum(map(bool, by_id.values())) == 3  # kal; 3 others
    identity, out = run_identity(
        tmp_path,
        {"demo": (*demo, DEMO_SPLITS), "more": (*more, block, True)},
        voices=VoiceRules(enabled=False),
    )
    held_out = sum(
        split["records"]
        for stats, *_ in out.values()
        for name, split in stats["splits"].items()
        if name != TRAIN
    )
    assert identity["held_out"] == held_out > 0
    assert out["more"][0]["splits"].get("dev_unseen", {}).get("records", 0) == 4 * sum(
        1 for v in by_who.values() if v
    )


def test_a_contradicting_splits_block_fails_the_identity_job_naming_its_dataset(tmp_path):
    bad = {"dev_unseen": {"fraction": 0.6}, "test_unseen": {"fraction": 0.5}}
    with pytest.raises(SharflowError, match=r"^datasets\.more\.splits: the unseen fractions"):
        link_identities(
            {"more": DatasetIdentity([], bad)},
            rules=MatchRules(),
            out_links=str(tmp_path / "links.jsonl"),
            out_stats=str(tmp_path / "stats.json"),
        )
    assert not list(tmp_path.iterdir())


def _speaker(dataset, name, vector, split="train", seconds=20.0):
    s = Speaker(dataset, name, name, np.asarray(vector, dtype=np.float64), seconds)
    s.splits[split] = 4
    return s


def test_a_pair_is_decided_once_and_stays_decided_as_its_voices_drift():
    """Unit vectors at chosen angles: a pair linked at 0.95 stays linked when growth moves it to 0.90
    (flagged drifted), is decided afresh under other rules, and is not decided while a side has too
    little audio; the same id in two datasets is linked whatever the voices."""

    def voices(sim, seconds=20.0):
        v = Voices()
        angle = np.arccos(sim)
        held = _speaker("a", "x", [1.0, 0.0, 0.0], "dev_unseen")
        v.speakers = {
            ("a", "x"): held,
            ("b", "y"): _speaker("b", "y", [np.cos(angle), np.sin(angle), 0.0], seconds=seconds),
            ("b", "z"): _speaker("b", "z", [0.0, 0.0, 1.0]),
        }
        return v

    rules = VoiceRules()
    first = link_speakers(voices(0.95), rules, {})
    assert [(r["pair"], r["linked"], r["how"], r["similarity"]) for r in first] == [
        ("a:x|b:y", True, "voice", 0.95)
    ]
    earlier = {r["pair"]: r for r in first}
    grown = link_speakers(voices(0.90), rules, earlier)
    assert [(r["linked"], r["similarity"], r["decided_similarity"], r.get("drifted")) for r in grown] == [
        (True, 0.9, 0.95, True)
    ]
    assert link_speakers(voices(0.90), VoiceRules(min_similarity=0.93), earlier)[0]["linked"] is False
    assert link_speakers(voices(0.90), rules, {})[0]["how"] == "not_linked"
    assert link_speakers(voices(0.95, seconds=5.0), rules, {}) == []  # too little audio: not decided
    v = voices(0.0)
    v.speakers[("b", "x")] = _speaker("b", "x", [0.0, -1.0, 0.0])  # the same id, another voice
    assert [(r["pair"], r["how"]) for r in link_speakers(v, rules, {})] == [("a:x|b:x", "id")]


def test_a_pair_with_exactly_min_seconds_is_decided_and_a_decision_that_still_holds_has_not_drifted():
    """min_seconds is inclusive on both sides of a pair; a row keeps both speakers' seconds to three
    decimals; a pair decided earlier (linked, or not linked) whose similarity still agrees with its
    decision is not flagged as drifted."""

    def voices(sim, held_seconds, other_seconds):
        v = Voices()
        angle = np.arccos(sim)
        v.speakers = {
            ("a", "x"): _speaker("a", "x", [1.0, 0.0], "dev_unseen", seconds=held_seconds),
            ("b", "y"): _speaker("b", "y", [np.cos(angle), np.sin(angle)], seconds=other_seconds),
        }
        return v

    rules = VoiceRules()
    assert [(r["linked"], r["how"]) for r in link_speakers(voices(0.95, 12.0, 12.0), rules, {})] == [
        (True, "voice")
    ]
    assert link_speakers(voices(0.95, 12.0, 11.999), rules, {}) == []
    assert link_speakers(voices(0.95, 11.999, 12.0), rules, {}) == []
    first = link_speakers(voices(0.95, 12.34567, 20.1234), rules, {})
    assert (first[0]["held_out"]["seconds"], first[0]["speaker"]["seconds"]) == (12.346, 20.123)
    for sim in (0.95, 0.9):  # linked by voice; not linked (a near miss)
        earlier = {r["pair"]: r for r in link_speakers(voices(sim, 20.0, 20.0), rules, {})}
        again = link_speakers(voices(sim, 20.0, 20.0), rules, earlier)
        assert [(r["how"], "drifted" in r) for r in again] == [
            ("voice" if sim > 0.935 else "not_linked", False)
        ]


def test_the_speaker_stats_count_the_unseen_and_those_with_enough_audio():
    """What the report and the card show of the speakers: how many, how many held out unseen (all of
    their records in one unseen split), how many have the audio to be compared (min_seconds, inclusive)."""
    from sharflow.identity.links import speaker_stats

    v = Voices()
    both = _speaker("b", "m", [0.0, 1.0], "dev_unseen", seconds=30.0)
    both.splits["train"] = 2  # a speaker with train records too is not held out unseen
    v.speakers = {
        ("a", "x"): _speaker("a", "x", [1.0, 0.0], "dev_unseen"),
        ("a", "y"): _speaker("a", "y", [0.0, 1.0], "test_unseen", seconds=5.0),
        ("b", "z"): _speaker("b", "z", [1.0, 1.0], seconds=12.0),
        ("b", "w"): _speaker("b", "w", [1.0, -1.0], seconds=11.9),
        ("b", "m"): both,
    }
    stats = speaker_stats(v, VoiceRules(), [])
    assert (stats["speakers"], stats["held_out_unseen"], stats["with_enough_audio"]) == (5, 2, 3)
    assert stats["rules"] == {"min_similarity": 0.935, "min_seconds": 12.0}
    off = speaker_stats(v, VoiceRules(enabled=False), [])
    assert off["voices"] is False and "with_enough_audio" not in off and off["held_out_unseen"] == 2


def test_voices_compared_in_blocks_decide_as_in_one_block(monkeypatch):
    """A held-out voice against nine others at chosen similarities, compared two at a time (BLOCK 2) and
    all at once: the same decisions, the linked pair and the NEAR_PER_SPEAKER closest near misses (the
    closest in later blocks than the others), not the farthest."""
    import sharflow.identity.voices as voices_module

    sims = [0.5, 0.84, 0.86, 0.95, 0.87, 0.88, 0.90, 0.91, 0.92]  # one linked, seven near, one far
    v = Voices()
    v.speakers = {("a", "x"): _speaker("a", "x", [1.0, 0.0], "dev_unseen")}
    for i, sim in enumerate(sims):
        v.speakers[("b", f"s{i}")] = _speaker("b", f"s{i}", [sim, np.sqrt(1 - sim * sim)])
    whole = link_speakers(v, VoiceRules(), {})
    monkeypatch.setattr(voices_module, "BLOCK", 2)
    assert link_speakers(v, VoiceRules(), {}) == whole
    decided = sorted((r["similarity"], r["how"]) for r in whole)
    assert decided == [(s, "not_linked") for s in (0.87, 0.88, 0.9, 0.91, 0.92)] + [(0.95, "voice")]


def test_the_voice_rules_are_the_config_blocks_with_its_defaults_and_a_bad_pair_named():
    assert VoiceRules.from_config({}) == VoiceRules()
    assert VoiceRules.from_config({"confirm": None, "deny": None, "embedder_options": None}) == VoiceRules()
    block = {
        "enabled": False,
        "min_similarity": "0.9",
        "min_seconds": 3,
        "confirm": [["a:x", "b:y"]],
        "deny": [("a:x", "c:z"), ["b:q", "a:x"]],
        "embedder": "nemo",
        "embedder_options": {"weights": "w.nemo", "batch": 8},
    }
    assert VoiceRules.from_config(block) == VoiceRules(
        enabled=False,
        min_similarity=0.9,
        min_seconds=3.0,
        confirm=(frozenset({"a:x", "b:y"}),),
        deny=(frozenset({"a:x", "c:z"}), frozenset({"a:x", "b:q"})),
        embedder="nemo",
        embedder_options=(("batch", 8), ("weights", "w.nemo")),
    )
    assert VoiceRules.from_config({"enabled": 1}).enabled is True
    for key in ("confirm", "deny"):
        for bad in (["a:x"], ["a:x", "b"], "ab", ["a:x", "b:y", "c:z"], [1, 2], ["a:x", None]):
            with pytest.raises(SharflowError) as e:
                VoiceRules.from_config({key: [bad]})
            assert str(e.value) == (
                f"identity.voices.{key}: {bad!r} is not a pair of speakers; write "
                '["<dataset>:<speaker id>", "<dataset>:<speaker id>"]'
            )


def test_a_grown_corpus_is_fingerprinted_and_embedded_only_where_it_grew(tmp_path):
    """The part's files of the last run are kept (update() outputs): a record inserted mid-file and
    one whose file changed are measured, the rest reused; the files equal a fresh run's, byte for
    byte; files that are not the ones the last stats describe are not reused."""
    records, root, _ = demo_dataset(tmp_path)
    lines = records.read_text().splitlines(keepends=True)
    first = tmp_path / "first.jsonl"
    first.write_text("".join(lines[:20] + lines[21:40]))
    changed_root = tmp_path / "audio"
    shutil.copytree(root, changed_root)

    def run(source, name, dim=None):  # dim: the caller's guess of the embedder's size, not used
        voices = VoiceEmbedding() if dim is None else VoiceEmbedding(dim=dim)
        stats, files = identity_part(tmp_path / name, source, changed_root, voices)
        return stats, [Path(f).read_bytes() for f in files]

    assert run(first, "grown")[0]["measured"] == 39
    touched = changed_root / json.loads(lines[5])["audio_filepath"]
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    grown = tmp_path / "grown.jsonl"
    grown.write_text("".join(lines[:41]))  # line 20 inserted mid-file, line 40 at the end
    stats, files = run(grown, "grown")
    same_file = sum(
        json.loads(x)["audio_filepath"] == json.loads(lines[5])["audio_filepath"] for x in lines[:41]
    )
    assert (stats["measured"], stats["reused"]) == (2 + same_file, 39 - same_file)
    fresh_stats, fresh = run(
        grown, "fresh", VoiceEmbedding(dim=7)
    )  # the size is the model's, not the caller's
    assert fresh_stats["measured"] == 41 and files == fresh
    seconds = round(sum(json.loads(x)["duration"] for x in lines[:41]), 3)
    hashes = len(np.load(tmp_path / "fresh" / "part.npy"))
    counted = {"records": 41, "unreadable": 0, "unusable": 0, "hashes": hashes, "audio_seconds": seconds}
    assert {k: fresh_stats[k] for k in counted} == counted
    assert len(set(np.load(tmp_path / "fresh" / "part.npy")["hash"].tolist())) > 1000  # hashes that vary
    # the embedder's options are in every entry's key: other options measure every record again
    other = identity_part(
        tmp_path / "grown", grown, changed_root, VoiceEmbedding(options=(("level", "raise"),))
    )
    assert (other[0]["measured"], other[0]["reused"]) == (41, 0)
    assert Path(other[1][2]).read_bytes() != fresh[2]  # (voices that differ: the options matter)

    # without voices (no voices file) the fingerprints alone are kept and reused
    def fingerprints_only():
        out = tmp_path / "novoices"
        return run_identity_part(
            0,
            records=str(grown),
            parts=1,
            audio_root=str(changed_root),
            out_records=str(out / "part.jsonl"),
            out_hashes=str(out / "part.npy"),
            out_stats=str(out / "part.stats.json"),
        )

    assert (fingerprints_only()["measured"], fingerprints_only()["reused"]) == (41, 41)
    (tmp_path / "grown" / "part.npy").write_bytes(files[1][:-8])  # not what its stats describe
    assert run(grown, "grown")[0]["measured"] == 41


def test_the_best_offset_counts_one_frame_either_side_and_nothing_else():
    assert best_offset_count(np.array([], dtype=np.int32)) == 0
    assert best_offset_count(np.array([4])) == 1
    assert best_offset_count(np.array([5, 5, 5])) == 3  # no neighbours: nothing added
    assert best_offset_count(np.array([5, 5, 6, 6, 6, 7])) == 6  # 6 with 5 and 7 either side
    assert best_offset_count(np.array([5, 5, 6, 6, 6, 8])) == 5  # 8 is two from 6: not counted


def test_a_clip_without_a_fingerprint_matches_nothing_and_disjoint_ones_score_zero():
    rate = 16000
    a, b = (
        fingerprint(np.random.default_rng(seed).normal(0, 0.3, rate * 3).astype(np.float32), rate)
        for seed in (0, 1)
    )
    silent = fingerprint(np.zeros(rate, dtype=np.float32), rate)
    assert not silent.usable and len(silent) == 0 and silent.times.shape == (0,)
    assert silent.hashes.dtype == np.uint32 and silent.times.dtype == np.int32
    assert a.usable and b.usable and match(a, a) == 1.0
    assert match(a, silent) == 0.0 and match(silent, a) == 0.0
    shared = np.intersect1d(a.hashes, b.hashes)
    only_b = ~np.isin(b.hashes, shared)
    assert match(a, Fingerprint(b.hashes[only_b], b.times[only_b])) == 0.0  # no hash in common
    one = Fingerprint(np.sort(np.append(b.hashes[only_b], a.hashes[0])), np.zeros(only_b.sum() + 1, np.int32))
    assert match(a, one) > 0  # a single hash in common counts
    few = Fingerprint(a.hashes[:10], a.times[:10])  # a's own hashes, too few to be a fingerprint
    assert not few.usable and match(a, few) == 0.0 and match(few, a) == 0.0


def test_a_pair_at_exactly_the_threshold_is_linked_and_a_denied_pair_says_so():
    h = Speaker("a", "s1", "s1", np.ones(4), seconds=20.123456, splits={"dev_unseen": 3})
    o = Speaker("b", "s2", "s2", np.ones(4), seconds=30.0, splits={"train": 5})
    rules = VoiceRules(min_similarity=0.9)
    row = voices_decide(h, o, 0.9, rules, {})
    assert (row["linked"], row["how"], row["decided_similarity"]) == (True, "voice", 0.9)
    assert row["held_out"]["seconds"] == 20.123 and row["speaker"]["seconds"] == 30.0
    assert voices_decide(h, o, 0.8999, rules, {})["how"] == "not_linked"
    denied = voices_decide(
        h, o, 0.99, VoiceRules(min_similarity=0.9, deny=(frozenset(("a:s1", "b:s2")),)), {}
    )
    assert (denied["linked"], denied["how"]) == (False, "denied")
    assert voices_rank(None) == -2.0 and voices_rank(-1.0) == -1.0 and voices_rank(0.5) == 0.5


def test_each_train_record_names_the_first_record_with_its_digest_from_two_records_on():
    first = _first_copies
    assert first(np.array([], np.uint64)).tolist() == [] and first(np.array([7], np.uint64)).tolist() == [-1]
    assert first(np.array([7, 7], np.uint64)).tolist() == [-1, 0]  # the smallest corpus with a copy
    assert first(np.array([9, 7, 9, 7, 9, 3], np.uint64)).tolist() == [-1, -1, 0, 1, 0, -1]


def test_a_drifted_pair_is_named_with_its_decision_and_both_similarities(caplog):
    pair = {"pair": ["a:s1", "b:s2"], "decided_similarity": 0.91, "similarity": 0.62, "drifted": True}
    with caplog.at_level(logging.WARNING):
        _warn_drifted([{**pair, "linked": True}, {**pair, "linked": False}, {**pair, "drifted": False}])
    said = "sharflow: the speakers ['a:s1', 'b:s2'] were decided {} at similarity 0.91 and score 0.62 now; "
    tail = "confirm or deny the pair under identity.voices to settle it"
    assert caplog.messages == [said.format(how) + tail for how in ("linked", "not linked")]


def test_a_records_person_is_its_who_else_its_speaker_and_pairs_keep_four_decimals():
    voices = Voices()
    voices.add("a", {"speaker": "s1", "who": "p7", "duration": 20.0, "hashes": 3}, "dev_unseen", np.ones(2))
    voices.add("b", {"speaker": "s2", "duration": 20.0, "hashes": 3}, "train", np.ones(2))
    assert [(s.who, s.seconds) for s in voices.speakers.values()] == [("p7", 20.0), ("s2", 20.0)]
    cos = 0.8765432  # a near miss below 0.9, with more decimals than a decision keeps
    voices.speakers[("b", "s2")].total = np.array([cos, np.sqrt(1 - cos**2)], np.float32)
    voices.speakers[("a", "s1")].total = np.array([1.0, 0.0], np.float32)
    rows = link_speakers(voices, VoiceRules(min_similarity=0.9, min_seconds=10.0), {})
    assert [(r["how"], r["similarity"]) for r in rows] == [("not_linked", 0.8765)]


def landmarks(anchors) -> np.ndarray:
    """A fingerprint as the index holds it from anchor peaks: [(time, bin, [(freq step, time step)])],
    each anchor's pairs at its time (so its pairs make triplets, as a real anchor's do)."""
    from sharflow.identity.fingerprint import MAX_DF

    rows = [((f << 14) | ((df + MAX_DF) << 7) | dt, t) for t, f, steps in anchors for df, dt in steps]
    out = np.zeros(len(rows), HASH_DTYPE)
    out["hash"], out["time"] = zip(*rows, strict=True)
    return np.sort(out, order=("hash", "time"))


STEPS = [(2, 5), (-3, 9), (7, 14)]  # an anchor's three pairs


def test_a_lookup_finds_a_triplet_whose_anchor_or_one_partner_moved_a_frame_but_not_two_partners():
    from sharflow.identity.fingerprint import triplets

    stored = landmarks([(50, 100, STEPS[:2])])  # one anchor, two pairs: one triplet
    key = set(triplets(stored["hash"], stored["time"])[0].tolist())
    assert len(key) == 1

    def looked_up(steps):
        query = landmarks([(50, 100, steps)])
        return set(triplets(query["hash"], query["time"], moved=True)[0].tolist())

    (df1, dt1), (df2, dt2) = STEPS[:2]
    assert key <= looked_up(STEPS[:2])
    assert key <= looked_up([(df1, dt1 + 1), (df2, dt2)])  # its first partner a frame later
    assert key <= looked_up([(df1, dt1), (df2, dt2 - 1)])  # its second a frame earlier
    assert key <= looked_up([(df1, dt1 - 1), (df2, dt2 - 1)])  # its anchor a frame later
    assert not key & looked_up([(df1, dt1 + 1), (df2, dt2 - 1)])  # two peaks moved: another triplet
    assert not key & looked_up([(df1, dt1 + 2), (df2, dt2)])  # two frames: another triplet
    assert len(looked_up(STEPS[:2])) == 7  # each triplet as it is and with one of its 3 peaks moved


def test_a_match_counts_the_hashes_one_frame_either_side_of_its_best_offset():
    held = HeldOut()
    a = [(10 * k, 100 + k, STEPS) for k in range(4)]  # 12 hashes
    b = [(10 * k, 20 + k, STEPS) for k in range(8)]  # 24 hashes
    for name, anchors in (("a", a), ("b", b)):
        entry = {"audio_filepath": name, "offset": 0.0, "duration": 1.0, "span": name}
        held.add("ds", entry, "dev_seen", landmarks(anchors))
    held.freeze()
    shifted = [1, 0, 0, 0, 0, -1, -1, -2]  # b's anchors a frame off, on, a frame off the other way, two off
    query = a[:1] + [(t + d, f, steps) for (t, f, steps), d in zip(b, shifted, strict=True)]
    assert held.best(landmarks(query), MatchRules()) == (1, 21 / 24, 21)  # 3 + 12 + 6 of b's 24
    # hashes 5 frames off are another offset: they add nothing to the best, which has no neighbour
    apart = [*b[:4], (b[4][0] - 5, *b[4][1:])]
    assert held.best(landmarks(apart), MatchRules()) == (1, 12 / 15, 12)  # of the query's 15


def test_a_lookup_scores_the_records_that_share_triplets_and_the_most_of_them_first(monkeypatch):
    """A held-out record is scored by its pairs only if it shares CANDIDATE_VOTES triplets with the
    query at one offset: an anchor's three pairs make three triplets, an anchor of one pair none.
    Of more candidates than MAX_CANDIDATES, those with the most triplets are scored."""
    import sharflow.identity.held_out as held_out

    assert (held_out.CANDIDATE_VOTES, held_out.MAX_CANDIDATES) == (2, 64)
    lone = [(0, 1)]  # pairs with no partner at their anchor: no triplet
    held = HeldOut()
    records = {
        "lone": [(5 * k, 60 + k, lone) for k in range(30)],  # 30 hashes, 0 triplets
        "two": [(5 * k, 90 + k, STEPS[:2]) for k in range(15)],  # 30 hashes, 15 triplets
        "three": [(5 * k, 120 + k, STEPS) for k in range(10)],  # 30 hashes, 30 triplets
    }
    for name, anchors in records.items():
        entry = {"audio_filepath": name, "offset": 0.0, "duration": 1.0, "span": name}
        held.add("ds", entry, "dev_seen", landmarks(anchors))
    held.freeze()
    assert len(held.hashes) == 90 and len(held.triplets) == 45
    for owner, name in enumerate(records):
        found = held.best(landmarks(records[name]), MatchRules())
        assert found == (None if name == "lone" else (owner, 1.0, 30)), name
    anyhow = MatchRules(min_score=0.0, min_matched=0)
    assert held.best(landmarks(records["two"][:1]), anyhow) is None  # one anchor: one triplet, one vote
    assert held.best(landmarks(records["two"][:2]), anyhow) == (1, 1.0, 4)  # two votes: scored by pairs
    assert held.best(landmarks(records["two"][:1] * 2), anyhow) is None  # its triplet held thrice: one vote
    query = landmarks(records["two"][:5] + records["three"][:2])  # 5 triplets of two, 6 of three
    monkeypatch.setattr(held_out, "MAX_CANDIDATES", 1)
    assert held.best(query, anyhow) == (2, 6 / 16, 6)  # the most triplets, scored alone
    monkeypatch.setattr(held_out, "MAX_CANDIDATES", 2)
    assert held.best(query, anyhow) == (1, 10 / 16, 10)  # both scored: 10 pairs beat 6


def test_a_found_triplet_names_its_record_as_a_binary_search_over_the_starts_would():
    """The owners of pair positions (HeldOut._owners: a table a block of 2^OWNER_BLOCK pairs, then a
    walk): records of many sizes, empty ones first, side by side and last, records longer than a
    block and many in one block; every pair position and the block edges give the last record
    starting at or before it, as np.searchsorted does."""
    import sharflow.identity.held_out as held_out

    rng = np.random.default_rng(3)
    block = 1 << held_out.OWNER_BLOCK
    sizes = np.concatenate(
        ([0, 0], rng.integers(0, 3 * block, 200), [0, 0, 5, 0], rng.integers(0, 9, 300), [0])
    )
    held = HeldOut()
    held.sizes, held.triplets = sizes, np.zeros(1, np.uint64)
    held._derive()
    pairs = np.arange(int(sizes.sum()))
    owners = held._owners(pairs)
    assert (owners == np.searchsorted(held.starts, pairs, side="right") - 1).all()
    assert len(np.unique(owners)) > 300 and (sizes[owners] > 0).all()  # many records, never an empty one


def test_a_part_counts_a_missing_file_as_unreadable_and_silence_as_unusable(tmp_path, monkeypatch):
    """A missing file's records are unreadable (their rows say why), a silent file's unusable; the
    part writes its scratch beside its files, not in the system's temporary folder (which on a
    cluster node may be small): here that folder does not exist."""
    records, root, _ = demo_dataset(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    lines = records.read_text().splitlines(keepends=True)[:6]
    rows = [json.loads(x) for x in lines]
    audio = tmp_path / "audio"
    shutil.copytree(root, audio)
    missing = rows[0]["audio_filepath"]
    silent = {r["audio_filepath"] for r in rows[-2:]}
    (audio / missing).unlink()
    for name in silent:
        x, rate = sf.read(audio / name, dtype="float32")
        sf.write(audio / name, np.zeros_like(x), rate)
    source = tmp_path / "six.jsonl"
    source.write_text("".join(lines))
    stats, files = identity_part(tmp_path / "part", source, audio)
    n_missing = sum(r["audio_filepath"] == missing for r in rows)
    n_silent = sum(r["audio_filepath"] in silent for r in rows)
    assert n_silent >= 2 and (stats["records"], stats["unreadable"], stats["unusable"]) == (
        6,
        n_missing,
        n_silent,
    )
    entries = read_jsonl(files[0])
    assert len(np.load(files[1])) == stats["hashes"] == sum(e["hashes"] for e in entries) > 0
    for entry in entries[:n_missing]:
        assert (entry["hashes"], entry["utterance"]) == (0, None) and "key" not in entry
        assert entry["error"].startswith(f"{missing}: ")
    # the identity job passes over the unreadable records and checks every other one
    stats = link_identities(
        {"six": DatasetIdentity([files[:2]], {})},
        rules=MatchRules(),
        out_links=str(tmp_path / "links.jsonl"),
        out_stats=str(tmp_path / "stats.json"),
    )
    assert n_missing == 1 and stats["train_checked"] == {"six": 6 - n_missing}
    # a part of silent records only: no hashes, in a file of the hashes' own dtype
    quiet = tmp_path / "quiet.jsonl"
    quiet.write_text(
        "".join(line for line, r in zip(lines, rows, strict=True) if r["audio_filepath"] in silent)
    )
    stats, files = identity_part(tmp_path / "quiet", quiet, audio)
    hashes = np.load(files[1])
    assert (stats["unusable"], stats["hashes"], len(hashes), hashes.dtype) == (n_silent, 0, 0, HASH_DTYPE)


def test_each_peak_is_paired_with_the_next_peaks_in_time_within_reach():
    """The hashes of a real utterance are exactly the documented pairing of their own peaks: each
    peak (by time, then frequency) with the next FANOUT later ones within MAX_DT frames and MAX_DF
    bins. The peaks are read back from the hashes (anchor bin and time, partner bin and time); a
    peak no hash names pairs with nothing, so it cannot change the pairs. VERSION keys stored
    fingerprints; this is what it promises to be."""
    from sharflow.identity.fingerprint import FANOUT, MAX_DF, MAX_DT

    fp = fingerprint(*demo_audio(max(MANIFEST, key=lambda r: r["duration"])))
    f1 = (fp.hashes >> 14).astype(int)
    df = ((fp.hashes >> 7) & 127).astype(int) - MAX_DF
    dt = (fp.hashes & 127).astype(int)
    t1 = fp.times.astype(int)
    anchors = zip(t1.tolist(), f1.tolist(), strict=True)
    peaks = sorted({*anchors, *zip((t1 + dt).tolist(), (f1 + df).tolist(), strict=True)})
    expected = []
    for i, (t, f) in enumerate(peaks):
        later = [(u, g) for u, g in peaks[i + 1 :] if u - t <= MAX_DT]
        partners = [(u, g) for u, g in later if u > t and abs(g - f) <= MAX_DF][:FANOUT]
        expected += [(t, f, g - f, u - t) for u, g in partners]
    made = sorted(zip(t1.tolist(), f1.tolist(), df.tolist(), dt.tolist(), strict=True))
    assert len(made) > 300 and made == sorted(expected)
    fanned = np.unique(np.stack([t1, f1]), axis=1, return_counts=True)[1]
    assert fanned.max() == FANOUT and len(set(dt.tolist())) > 20 and len(set(df.tolist())) > 20


def test_the_identity_jobs_log_their_counts_and_progress(tmp_path):
    """A job's log says what it did (records, workers, the index, the links) and shows a progress
    bar with its total, name and unit: the counts are the stats'."""
    import re

    from sharflow.core.logs import job_log

    demo = demo_dataset(tmp_path)
    log = tmp_path / "identity.log"
    with job_log(str(log)):
        identity, _ = run_identity(tmp_path, {"demo": (*demo, DEMO_SPLITS)}, voices=VoiceRules(enabled=False))
    text = log.read_text()
    n = demo[2]
    assert f"identity part 0 of 1: {n} records, 1 workers" in text
    assert re.search(rf"identity part 0: 100%\|[^|]*\| {n}/{n} \[[^]]*utt/s\]", text)
    held, hashes, triplets = identity["held_out"], identity["held_out_hashes"], identity["held_out_triplets"]
    checked = sum(identity["train_checked"].values())
    assert 0 < held < n and hashes > 100 and triplets > 100 and checked == n - held
    assert (
        f"identity: {held} held-out records indexed ({hashes} hashes, {triplets} triplets, "
        f"{identity['index_mb']:.1f} MB); {checked} train records to check; 0 speakers linked to held-out "
        "unseen ones" in text
    )
    assert re.search(rf"identity check 0: 100%\|[^|]*\| {checked}/{checked} \[[^]]*utt/s\]", text)
    found = {reason: count for reason, count in identity["by_reason"].items() if count}
    assert f"identity check 0 of 1: {checked} train records checked, links {found}" in text
    assert f"identity: links {found}, duplicates within train: keep" in text


def test_a_content_match_at_exactly_min_score_is_linked():
    """min_score is inclusive: 10 of 20 hashes shared at one offset score 0.5, a match under
    MatchRules(min_score=0.5) and not above it (min_matched likewise, at 10)."""
    pairs = STEPS[:2]
    held_fp = landmarks([(3 * k, 50 + k, pairs) for k in range(10)])
    query = landmarks(
        [(3 * k + 40, 50 + k, pairs) for k in range(5)] + [(k, 200 + k, pairs) for k in range(5)]
    )
    assert len(held_fp) == len(query) == 20  # the shared ten 40 frames later
    held = HeldOut()
    held.add("x", {"audio_filepath": "a", "offset": 0.0, "duration": 1.0, "span": "a"}, "dev_seen", held_fp)
    held.freeze()
    assert held.best(query, MatchRules(min_score=0.0, min_matched=0)) == (0, 0.5, 10)
    assert held.best(query, MatchRules(min_score=0.5, min_matched=10)) == (0, 0.5, 10)
    assert held.best(query, MatchRules(min_score=0.5001, min_matched=10)) is None
    assert held.best(query, MatchRules(min_score=0.5, min_matched=11)) is None


def test_a_bad_train_duplicates_action_is_named(tmp_path):
    with pytest.raises(SharflowError, match=r"identity.train_duplicates must be one of .*got 'twice'"):
        link_identities(
            {},
            rules=MatchRules(train_duplicates="twice"),
            out_links=str(tmp_path / "links.jsonl"),
            out_stats=str(tmp_path / "stats.json"),
        )


def _bursts(*events, seconds=1.5):
    """8 kHz audio of Hann-shaped tone bursts (start s, FFT bin, level dB), 100 ms each."""
    from sharflow.identity.fingerprint import N_FFT, RATE

    x = np.zeros(int(seconds * RATE), np.float32)
    n = RATE // 10
    for start, bin_, level in events:
        t = np.arange(n) / RATE
        at = int(start * RATE)
        x[at : at + n] += 10 ** (level / 20) * np.hanning(n) * np.sin(2 * np.pi * bin_ * RATE / N_FFT * t)
    return x, RATE


def test_peaks_count_at_a_clips_edges_and_down_to_floor_db_below_its_loudest():
    """A burst in a clip's first 100 ms is a landmark (the clip's edge is not a louder neighbour),
    and so are bursts 58 dB below the loudest, not 62 dB below (FLOOR_DB 60): read from the bins
    the hashes are anchored at."""
    from sharflow.identity.fingerprint import FLOOR_DB, NEIGHBOURHOOD

    def anchors(quiet_db):
        fp = fingerprint(*_bursts((0.0, 60, 0.0), (0.35, 100, -quiet_db), (0.55, 110, -quiet_db)))
        return {(int(h) >> 14, int(t)) for h, t in zip(fp.hashes, fp.times, strict=True)}

    assert FLOOR_DB == 60.0
    kept = anchors(58.0)
    assert min(t for b, t in kept if b == 60) < NEIGHBOURHOOD[1] // 2  # the first burst, at the edge
    assert {b for b, _ in kept} >= {60, 100}  # the quiet bursts pair with each other
    assert kept == {(60, 2), (100, 46)}  # 60 -> 100 and 100 -> 110 (60 -> 110 is over MAX_DT)
    dropped = anchors(62.0)
    assert not dropped  # the loud burst alone: no peak to pair with


def test_an_utterance_is_keyed_by_its_spoken_form_where_the_record_has_one(tmp_path):
    """A record's utterance key is its speaker's and its normalized_text's (the spoken form the
    text stage wrote), else its text's: "$5" and "five dollars" said by one voice are one utterance."""
    records, root, _ = demo_dataset(tmp_path)
    rows = [json.loads(x) for x in records.read_text().splitlines()[:2]]
    rows[0]["normalized_text"] = "five dollars, said in full"
    source = write_jsonl(tmp_path / "two.jsonl", rows)
    _, files = identity_part(tmp_path / "part", source, root)
    spoken, written = read_jsonl(files[0])
    assert spoken["who"] == spoken["speaker"]  # by default a dataset shares its speaker ids
    assert spoken["utterance"] == utterance_key(spoken["who"], "five dollars, said in full")
    assert spoken["utterance"] != utterance_key(spoken["who"], rows[0]["text"])
    assert written["utterance"] == utterance_key(written["who"], rows[1]["text"]) is not None


def test_the_identity_jobs_write_the_same_utf8_bytes_whatever_the_locale(tmp_path):
    """A cluster node may run a job in a locale whose encoding is ASCII (LC_ALL=C without Python's
    UTF-8 coercion): the identity parts, links and speaker decisions, which hold speakers' names as
    they are ("kå", "mü"; held out, "kål"), are written and read as UTF-8 all the same, byte for
    byte as in a UTF-8 locale. The same parts, job and splits run here and, twice (the second run
    reads the first's decisions), in a child process in that locale."""
    import subprocess
    import sys

    ids = {"kal": "kå", "us_m3": "mü", "gb_f2": "gé", "awb": "añ"}
    demo, more = _halves(tmp_path / "in", ids, demo_ids={"kal": "kål", "us_m3": "üs_m3"})
    splits = {**DEMO_SPLITS, "dev_unseen": {"speakers": ["kål"]}, "test_unseen": {"speakers": ["üs_m3"]}}
    datasets = {"demo": [str(demo[0]), str(demo[1]), demo[2], splits]}
    datasets["more"] = [str(more[0]), str(more[1]), more[2], {}, True]
    run_identity(tmp_path / "utf8", {k: (Path(v[0]), Path(v[1]), *v[2:]) for k, v in datasets.items()})
    code = (
        "import json, sys\nfrom pathlib import Path\nfrom testkit import run_identity\n"
        "sets = {k: (Path(v[0]), Path(v[1]), *v[2:]) for k, v in json.loads(sys.argv[2]).items()}\n"
        "for _ in range(2):  # the second run reads the decisions the first wrote\n"
        "    run_identity(Path(sys.argv[1]), sets)\n"
    )
    env = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    probe = [sys.executable, "-c", "import locale; print(locale.getpreferredencoding(False))"]
    assert subprocess.run(probe, env=env, capture_output=True, text=True).stdout.strip() == "ANSI_X3.4-1968"
    child = [sys.executable, "-c", code, str(tmp_path / "ascii"), json.dumps(datasets)]
    proc = subprocess.run(child, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    decisions = (tmp_path / "utf8" / "identity" / "speaker_decisions.jsonl").read_text(encoding="utf-8")
    assert '"kå"' in decisions and '"mü"' in decisions
    for name in ("identity/speaker_decisions.jsonl", "identity/links.jsonl", "identity/more/part.jsonl"):
        mine = (tmp_path / "utf8" / name).read_bytes()
        assert mine == (tmp_path / "ascii" / name).read_bytes().replace(b"/ascii/", b"/utf8/"), name
    for name, text in (("identity/more/part.jsonl", "kå"), ("identity/links.jsonl", "kål")):
        assert text.encode() in (tmp_path / "ascii" / name).read_bytes(), name  # as it is, not escaped


def test_a_pair_is_made_up_to_exactly_max_dt_frames_apart():
    """Two landmarks MAX_DT frames apart are a pair; one frame further they are not (tone bursts
    whose peak frames are read back from a burst alone)."""
    from sharflow.identity.fingerprint import HOP, MAX_DT, RATE

    def pairs(gap_frames):
        fp = fingerprint(*_bursts((0.0, 60, 0.0), (HOP * gap_frames / RATE, 100, -6.0)))
        return [(int(h) >> 14, int(h) & 127) for h in fp.hashes]

    assert pairs(MAX_DT) == [(60, MAX_DT)]
    assert pairs(MAX_DT + 1) == []
    assert pairs(20) == [(60, 20)]


def test_a_silent_record_adds_nothing_to_its_speakers_voice():
    """A record without hashes (silence, too short) adds neither its embedding nor its seconds to its
    speaker's voice, though it counts in the speaker's splits."""
    v = Voices()
    entry = {"speaker": "s", "duration": 4.0, "hashes": 50}
    v.add("d", entry, "train", np.array([1.0, 0.0], np.float32))
    v.add("d", {**entry, "hashes": 0}, "dev_seen", np.array([0.0, 1.0], np.float32))
    s = v.speakers[("d", "s")]
    assert (s.seconds, s.total.tolist(), sorted(s.splits)) == (4.0, [1.0, 0.0], ["dev_seen", "train"])


def test_a_named_pair_shows_its_similarity_to_four_decimals_whatever_it_is():
    """A pair named in identity.voices.deny is decided and shown with its similarity to four decimals,
    though it is far below min_similarity and out of the near-miss band."""
    v = Voices()
    angle = 1.2  # cosine 0.36235775...
    v.speakers = {
        ("a", "x"): _speaker("a", "x", [1.0, 0.0], "dev_unseen"),
        ("b", "y"): _speaker("b", "y", [np.cos(angle), np.sin(angle)]),
    }
    rules = VoiceRules(deny=(frozenset(("a:x", "b:y")),))
    assert link_speakers(v, VoiceRules(), {}) == []  # unnamed, it is not even a near miss
    [row] = link_speakers(v, rules, {})
    assert (row["how"], row["linked"], row["similarity"]) == ("denied", False, 0.3624)


def test_a_quality_part_writes_the_identity_part_from_its_one_decode_byte_for_byte(tmp_path, monkeypatch):
    """The one pass: a quality part with identity decodes each record once (counted) and embeds each
    voice once, the group's voices in one call (counted); its identity files equal the identity
    stage's own part's, byte for byte, and its metrics a quality part's without identity. Run again,
    it decodes nothing and keeps every entry; a grown manifest decodes only its new record."""
    from sharflow.core.layout import IdentityPartFiles
    from sharflow.identity import part as identity_module
    from sharflow.identity.part import IdentityOptions
    from sharflow.models.speaker_embedders.ge2e import GE2EEmbedder
    from sharflow.quality import rank as rank_module
    from sharflow.quality.part import MeasureSettings, run_quality_part

    prep = prepare_demo(tmp_path)
    lines = [x for x in (prep / "prepared.jsonl").read_text().splitlines() if json.loads(x)["duration"] < 3.5]
    missing = {**json.loads(lines[0]), "audio_filepath": "no_such.wav"}  # undecodable: an error entry
    first, grown = tmp_path / "first.jsonl", tmp_path / "grown.jsonl"
    first.write_text("\n".join([*lines[:5], json.dumps(missing)]) + "\n")
    grown.write_text("\n".join([lines[5], *lines[:5], json.dumps(missing)]) + "\n")
    voices = VoiceEmbedding("ge2e")
    root = str(DEMO / "audio")

    _, reference = identity_part(tmp_path / "reference", first, root, voices, dataset="demo")
    _, fresh = identity_part(tmp_path / "fresh", grown, root, voices, dataset="demo")
    decodes, forwards = [], []
    real_load, real_embed = rank_module.load_span, GE2EEmbedder.embed
    monkeypatch.setattr(rank_module, "load_span", lambda *a: (real_load(*a), decodes.append(a[0]))[0])
    monkeypatch.setattr(identity_module, "load_span", lambda *a: pytest.fail("identity decoded again"))
    monkeypatch.setattr(
        GE2EEmbedder, "embed", lambda self, waves: forwards.append(len(waves)) or real_embed(self, waves)
    )

    def one_pass(records, name, previous=None, identity=True):
        out = IdentityPartFiles(
            *(str(tmp_path / name / f) for f in ("p.jsonl", "p.npy", "p.voices.npy", "p.json"))
        )
        settings = MeasureSettings(
            root, 1, identity=IdentityOptions("demo", False, voices) if identity else None
        )
        decodes.clear(), forwards.clear()
        stats = run_quality_part(
            0,
            records=str(records),
            parts=1,
            out_metrics=str(tmp_path / name / "m.jsonl"),
            out_stats=str(tmp_path / name / "m.json"),
            settings=settings,
            device="cpu",
            previous=previous,
            out_identity=out if identity else None,
        )
        return stats, out

    stats, out = one_pass(first, "one")
    assert stats["measured"] == 6 and len(decodes) == 5  # the missing file fails to decode
    assert forwards == [5]  # each voice embedded once, the group's records in one call
    for mine, theirs in zip([out.records, out.hashes, out.voices], reference, strict=True):
        assert Path(mine).read_bytes() == Path(theirs).read_bytes(), mine
    entries = read_jsonl(out.records)
    assert len({e["digest"] for e in entries if "digest" in e}) == 5 and "error" in entries[-1]
    assert len({np.load(out.voices)["voice"][i].tobytes() for i in range(5)}) == 5  # distinct voices
    one_pass(first, "plain", identity=False)
    assert (tmp_path / "one" / "m.jsonl").read_bytes() == (tmp_path / "plain" / "m.jsonl").read_bytes()

    again, _ = one_pass(first, "one", previous=str(tmp_path / "one" / "m.jsonl"))
    assert (again["measured"], decodes, forwards) == (1, [], [])  # only the unreadable one, tried again
    assert json.loads(Path(out.stats).read_text())["reused"] == 5
    for mine, theirs in zip([out.records, out.hashes, out.voices], reference, strict=True):
        assert Path(mine).read_bytes() == Path(theirs).read_bytes(), mine

    grew, _ = one_pass(grown, "one", previous=str(tmp_path / "one" / "m.jsonl"))
    assert grew["measured"] == 2 and len(decodes) == 1 and forwards == [1]  # the new record's
    for mine, theirs in zip([out.records, out.hashes, out.voices], fresh, strict=True):
        assert Path(mine).read_bytes() == Path(theirs).read_bytes(), mine
