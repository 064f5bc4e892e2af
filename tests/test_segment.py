"""Long-form recordings into speaker segments (issue 75): the steps over arrays, the accounting, and
the shipped models' accuracy against the long-form test corpus's truth."""

import itertools
import json
import sys

import numpy as np
import pytest
import soundfile as sf
import torch

from sharflow.segment import cut, turns
from sharflow.segment.recording import KEPT, MADE_BY, Segmenter, decide
from sharflow.segment.score import Score, adjusted_rand_index, link_pairs, score, true_speaker
from testkit import REPO, data_files

sys.path.insert(0, str(REPO / "benchmarks"))
from longform.corpus import write_corpus

R = turns.RATE


def _pair_counting_ari(a, b) -> float:
    """The adjusted Rand index by its definition over every pair of items."""
    n = len(a)
    both = sum(a[i] == a[j] and b[i] == b[j] for i, j in itertools.combinations(range(n), 2))
    in_a = sum(a[i] == a[j] for i, j in itertools.combinations(range(n), 2))
    in_b = sum(b[i] == b[j] for i, j in itertools.combinations(range(n), 2))
    pairs = n * (n - 1) / 2
    expected = in_a * in_b / pairs
    return (both - expected) / ((in_a + in_b) / 2 - expected)


def test_the_adjusted_rand_index_is_the_pair_counting_one_and_ignores_label_names():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = rng.integers(0, 3, 30), rng.integers(0, 4, 30)
        assert adjusted_rand_index(a, b) == pytest.approx(_pair_counting_ari(a, b), abs=1e-12)
    a = rng.integers(0, 3, 50)
    assert adjusted_rand_index(a, (a + 1) % 3) == 1.0  # the same partition, renamed
    assert adjusted_rand_index(a, np.zeros(50)) == pytest.approx(0.0, abs=1e-12)  # one cluster: chance


def test_one_frame_over_the_threshold_in_a_pause_does_not_carry_a_span_on_and_two_do():
    settings = turns.TurnSettings()
    speech, pause = [0.99] * 40, [0.2] * 4
    spike = np.array([0.1] * 5 + speech + pause + [0.53] + [0.2] * 20, np.float32)
    # a frame above both neighbours is clipped to the higher; a dip and a rise of two frames stay
    assert turns.without_spikes(spike)[49] == np.float32(0.2)
    dip = np.array([0.9, 0.9, 0.3, 0.9, 0.9, 0.1, 0.6, 0.6, 0.1], np.float32)
    assert (turns.without_spikes(dip) == dip).all()
    end = (5 + 40) * turns.FRAME + 480  # the last speech frame's end and Silero's 30 ms pad
    assert turns.speech_spans(spike, len(spike) * turns.FRAME, settings) == [(5 * turns.FRAME - 480, end)]
    rise = spike.copy()
    rise[50] = 0.53  # two frames over the threshold: speech again, the span goes on (Silero's own rule)
    assert turns.speech_spans(rise, len(rise) * turns.FRAME, settings)[0][1] > end + 5 * turns.FRAME


def test_windows_cover_every_span_and_stay_inside_it():
    settings = turns.TurnSettings(window=1.0, hop=0.5)
    spans = [(0, int(0.4 * R)), (R, int(3.3 * R)), (5 * R, 6 * R)]
    wins = turns.windows(spans, settings)
    for i, (s, e) in enumerate(spans):
        mine = [(a, b) for j, a, b in wins if j == i]
        assert all(s <= a < b <= e for a, b in mine)
        assert mine[0][0] == s and mine[-1][1] == e
        assert all(b - a == min(R, e - s) for a, b in mine)
    assert [w[0] for w in wins] == sorted(w[0] for w in wins)


def test_short_label_runs_are_absorbed_by_their_longer_neighbour():
    cells = np.array([0, 0, 0, 0, 1, 0, 0, 2, 2, 2, 2, 2, 1])
    out = turns._absorb_short_runs(cells, 2)
    assert out.tolist() == [0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2]
    assert turns._absorb_short_runs(np.array([1]), 3).tolist() == [1]  # a span of one run keeps it


def test_a_piece_boundary_falls_on_the_quietest_frame_near_the_label_change():
    settings = turns.TurnSettings(window=1.0, hop=0.5)
    span = (0, 4 * R)
    probs = np.full(4 * R // turns.FRAME, 0.9, np.float32)
    quiet = int(2.2 * R) // turns.FRAME
    probs[quiet] = 0.1
    cells = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # the change guessed at 2.0 s
    pieces = turns.pieces(span, cells, probs, settings)
    assert [p[2] for p in pieces] == [0, 1]
    assert pieces[0][1] == pieces[1][0] == quiet * turns.FRAME + turns.FRAME // 2
    assert pieces[0][0] == 0 and pieces[1][1] == 4 * R


def test_segments_never_hold_two_speakers_and_respect_the_lengths():
    settings = cut.CutSettings(min_segment=3.0, max_segment=10.0, max_pause=1.0)
    probs = np.full(200 * R // turns.FRAME, 0.9, np.float32)
    s = lambda a, b, k: (int(a * R), int(b * R), k)  # noqa: E731
    pieces = [
        s(0, 2, 0), s(2.5, 4, 0),  # one speaker, a short pause: one segment
        s(4, 6, 1),  # a change of speaker with no pause: a new segment
        s(8, 9, 1),  # a pause of 2 s: closes; 1 s alone is too short
        s(10, 12, turns.OVERLAP), s(12, 13, turns.NO_SPEAKER),
        s(20, 45, 0),  # 25 s alone: cut into three parts of at most 10 s
    ]  # fmt: skip
    kept, dropped = cut.segments(pieces, probs, settings)
    assert [(a / R, b / R, k) for a, b, k in kept[:1]] == [(0, 4, 0)]
    assert all(b - a <= 10 * R and b - a >= 3 * R for a, b, _ in kept)
    assert [k for *_, k in kept] == [0, 0, 0, 0]  # speaker 1's 2 s + 1 s were too short
    assert sorted(r for *_, r in dropped) == sorted([cut.TOO_SHORT] * 2 + ["overlap", "no_speaker"])
    assert sum(b - a for a, b, _ in kept[1:]) == 25 * R
    whole = cut.account(60 * R, [(a, b, KEPT) for a, b, _ in kept] + dropped)
    assert whole[0][0] == 0 and whole[-1][1] == 60 * R
    assert all(x[1] == y[0] for x, y in itertools.pairwise(whole))
    with pytest.raises(ValueError, match="overlap"):
        cut.account(10 * R, [(0, 5 * R, KEPT), (4 * R, 6 * R, cut.SILENCE)])


def test_the_score_of_the_truth_itself_is_perfect_and_a_merged_one_is_not():
    truth = {
        "duration": 20.0,
        "speakers": ["a", "b"],
        "utterances": [
            {"start": 1.0, "end": 4.0, "speaker": "a"},
            {"start": 4.2, "end": 8.0, "speaker": "b"},
            {"start": 12.0, "end": 14.0, "speaker": "a", "overlapped": True},
            {"start": 12.5, "end": 15.0, "speaker": "b", "overlapped": True},
        ],
        "overlaps": [{"start": 12.5, "end": 14.0}],
        "music": [{"start": 16.0, "end": 19.0}],
    }
    seg = lambda a, b, k: {"start": a, "end": b, "speaker": k}  # noqa: E731
    perfect = score(truth, [seg(1.0, 4.0, 0), seg(4.2, 8.0, 1)])
    rates = (perfect.edge_rate, perfect.purity, perfect.coverage, perfect.ari)
    assert rates == pytest.approx((1.0, 1.0, 1.0, 1.0), abs=1e-9)
    assert perfect.stretches_kept == 0 and perfect.stretches == 2
    merged = score(truth, [seg(1.0, 8.0, 0), seg(11.0, 19.0, 0)])
    assert merged.purity < 0.8 and merged.mixed_segments == 2
    assert merged.stretches_kept == 2 and merged.music_kept == pytest.approx(3.0)
    assert merged.ari == pytest.approx(0.0, abs=1e-9)
    assert merged.edges_near == 2  # 1.0 and 8.0; 11.0 and 19.0 are 1 s from any edge


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A smaller copy of the benchmark's corpus: four recordings of 1.5-2.5 minutes."""
    out = tmp_path_factory.mktemp("longform")
    return write_corpus(out, recordings=4, minutes=(1.5, 2.5), seed=7)


@pytest.fixture(scope="module")
def segmented(corpus):
    torch.set_num_threads(1)
    segmenter = Segmenter()
    out = []
    for path in corpus:
        audio, _ = sf.read(path, dtype="float32")
        out.append((path, audio, segmenter.segment(audio)))
    return segmenter, out


def test_the_shipped_models_meet_the_bars_on_a_smaller_copy_of_the_corpus(segmented):
    _, results = segmented
    total = Score()
    for path, _, result in results:
        truth = json.loads(path.with_suffix(".truth.json").read_text())
        assert len(truth["speakers"]) >= 2 and truth["overlaps"] and truth["music"]
        # what the score compares carries information: several speakers found, several labels kept
        assert result.speakers >= 2 and len({k for *_, k in result.segments}) >= 2
        total.add(score(truth, [{"start": a / R, "end": b / R, "speaker": k} for a, b, k in result.segments]))
    assert total.edges >= 40
    assert total.edge_rate >= 0.90, total.summary()
    assert total.purity >= 0.98, total.summary()
    assert total.coverage >= 0.85, total.summary()
    assert total.stretches_kept == 0 and total.stretches == 2 * len(results), total.summary()
    assert total.ari >= 0.9, total.summary()


def test_every_second_is_kept_or_dropped_with_a_reason(segmented):
    _, results = segmented
    for _, audio, result in results:
        seconds = result.seconds()
        assert sum(seconds.values()) == pytest.approx(len(audio) / R, abs=1e-9)
        assert seconds[KEPT] > 0 and seconds[cut.SILENCE] > 0 and seconds["overlap"] > 0
        whole = result.stretches
        assert whole[0][0] == 0 and whole[-1][1] == len(audio)
        assert all(x[1] == y[0] for x, y in itertools.pairwise(whole))
        assert {(a, b) for a, b, w in whole if w == KEPT} == {(a, b) for a, b, _ in result.segments}


def test_the_segments_do_not_depend_on_the_embedders_batch_or_the_vads_company(segmented):
    from sharflow.models.speaker_embedders.ge2e import GE2EEmbedder

    segmenter, results = segmented
    _, audio, result = results[0]
    other = Segmenter(embedder=GE2EEmbedder(level="normalize", batch_partials=5))
    again = other.segment(audio)
    assert again.segments == result.segments and again.stretches == result.stretches
    # the VAD's chunks step side by side with another recording's: the same probabilities
    alone = segmenter.probabilities(audio)
    step = 960 * turns.FRAME
    chunks = [audio[max(0, k - 64 * turns.FRAME) : k + step] for k in range(0, len(audio), step)]
    company = segmenter.vad.probabilities([results[1][1][: 40 * R], *chunks])[1:]
    joined = np.concatenate([p if k == 0 else p[64:] for k, p in enumerate(company)])
    np.testing.assert_array_equal(joined, alone)


def _segment_dataset(recordings, durations, root, out, parts: int, workers: int = 1):
    """The segment jobs as the workflow runs them: `parts` parts over `workers` CPU ranks, merged."""
    from sharflow.segment.job import SegmentSettings, merge, plan_parts, segment_part

    by_path = {r.path: r for r in recordings}
    dirs = []
    for i, part in enumerate(plan_parts(durations, parts)):
        dirs.append(out / f"part{i}")
        segment_part(
            [by_path[p] for p in part], durations, str(root), dirs[-1], SegmentSettings(), device="cpu",
            workers=workers,
        )  # fmt: skip
    merge(recordings, dirs, "talks", out / "segments.jsonl", out / "stats.json", "none")
    return out / "segments.jsonl", json.loads((out / "stats.json").read_text()), dirs


@pytest.fixture(scope="module")
def long_dataset(corpus):
    from sharflow.segment.job import Recording

    root = corpus[0].parent
    (root / "broken.flac").write_bytes(b"not audio at all")
    recordings = [Recording(p.name) for p in corpus[:3]] + [Recording("broken.flac", speakers=("x",))]
    durations = {
        r.path: sf.info(root / r.path).duration if r.path != "broken.flac" else 0.0 for r in recordings
    }
    return root, recordings, durations


def test_the_segment_jobs_give_the_same_manifest_for_any_parts_and_ranks_and_account_for_every_second(
    long_dataset, tmp_path
):
    from sharflow.prepare.job import prepare_dataset
    from sharflow.segment.job import merge, plan_parts, run_part

    root, recordings, durations = long_dataset
    one, stats, dirs = _segment_dataset(recordings, durations, root, tmp_path / "one", parts=1)
    assert len(plan_parts(durations, 2)) == 2
    two, _, _ = _segment_dataset(recordings, durations, root, tmp_path / "two", parts=2, workers=2)
    assert one.read_bytes() == two.read_bytes()
    lines = [json.loads(x) for x in one.read_text().splitlines()]
    assert len(lines) == stats["segments"] > 10
    assert {x["audio_filepath"] for x in lines} == {r.path for r in recordings[:3]}
    assert all(x["speaker"].startswith("| Language:en Dataset:talks Speaker:rec_") for x in lines)
    assert all(3.0 <= x["duration"] <= 30.0 for x in lines)
    # every second: kept + dropped by reason = seconds in, per recording and in all
    assert sum(stats["seconds"].values()) == pytest.approx(stats["seconds_in"], abs=1e-4)
    for rec in stats["per_recording"]:
        assert sum(rec["seconds"].values()) == pytest.approx(rec["duration"], abs=1e-4)
    broken = next(r for r in stats["per_recording"] if r["recording"] == "broken.flac")
    assert broken["segments"] == 0 and broken["seconds"] == {"unreadable": 0.0}
    # a part rerun keeps what it wrote and redoes only what is missing
    results = sorted(dirs[0].glob("*.json"))
    first = results[0].read_bytes()
    results[1].unlink()
    assert run_part(recordings, str(root), dirs[0], Segmenter()) == {"done": 1, "resumed": 3}
    assert results[0].read_bytes() == first
    merge(recordings, dirs, "talks", tmp_path / "again.jsonl", tmp_path / "again.json", "none")
    assert (tmp_path / "again.jsonl").read_bytes() == one.read_bytes()
    results[1].unlink()
    with pytest.raises(FileNotFoundError, match="no segment result"):
        merge(recordings, dirs, "talks", tmp_path / "x.jsonl", tmp_path / "x.json", "none")
    # prepare reads the segments as spans of the long files (with text, as an ASR gives it)
    with_text = tmp_path / "with_text.jsonl"
    with_text.write_text("".join(json.dumps(x | {"text": "a segment"}) + "\n" for x in lines))
    summary = prepare_dataset(
        str(with_text), prepared=str(tmp_path / "p.jsonl"), rejected_dir=str(tmp_path / "rej"),
        stats=str(tmp_path / "p.json"), dataset="talks", audio_root=str(root),
    )  # fmt: skip
    assert summary["records_out"] == len(lines), summary


KILLED_PART = """
import json, sys
from pathlib import Path
from sharflow.segment.job import Recording, SegmentSettings, segment_part
root, out, paths = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
recordings = [Recording(p) for p in paths]
segment_part(recordings, {p: 1.0 for p in paths}, root, out, SegmentSettings(), device="cpu")
"""


def test_a_killed_segment_job_resumes_at_the_recording_it_was_on(long_dataset, tmp_path):
    import os
    import signal
    import subprocess
    import time

    root, recordings, durations = long_dataset
    whole, _, _ = _segment_dataset(recordings, durations, root, tmp_path / "whole", parts=1)
    out = tmp_path / "killed" / "part0"
    paths = json.dumps([r.path for r in recordings])
    job = subprocess.Popen(
        [sys.executable, "-c", KILLED_PART, str(root), str(out), paths], start_new_session=True
    )
    try:
        deadline = time.monotonic() + 600
        while not list(out.glob("*.json")) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(job.pid, signal.SIGKILL)  # killed after its first recording, inside the next
    finally:
        job.wait()
    done = sorted(out.glob("*.json"))
    assert 1 <= len(done) < len(recordings)
    # under a final name only complete results (a killed write leaves at most a hidden temporary)
    assert all(json.loads(p.read_text())["recording"] for p in out.iterdir() if not p.name.startswith("."))
    again, stats, _ = _segment_dataset(recordings, durations, root, tmp_path / "killed", parts=1)
    assert again.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(
        p.name for p in (tmp_path / "whole/part0").iterdir()
    )
    assert stats["recordings"] == len(recordings)


def test_beside_a_dropped_run_the_cut_goes_to_the_kept_side():
    settings = turns.TurnSettings(window=1.0, hop=0.5)
    span = (0, 6 * R)
    probs = np.full(6 * R // turns.FRAME, 0.9, np.float32)
    cells = np.array([turns.OVERLAP] * 6 + [0] * 6)  # the change guessed at 3.0 s, no pause near it
    pieces = turns.pieces(span, cells, probs, settings)
    assert pieces[0][1] == 4 * R  # a whole window into the kept side
    probs[int(3.4 * R) // turns.FRAME] = 0.2  # a pause on the kept side: cut there
    pieces = turns.pieces(span, cells, probs, settings)
    assert pieces[0][1] == int(3.4 * R) // turns.FRAME * turns.FRAME + turns.FRAME // 2
    kept_first = turns.pieces(span, cells[::-1].copy(), np.full_like(probs, 0.9), settings)
    assert kept_first[0][2] == 0 and kept_first[0][1] == 2 * R  # kept, then dropped: a window back


def test_an_overlap_run_shorter_than_min_overlap_is_absorbed():
    # windows that straddle a change of speaker look mixed for about a window: not an overlap
    cells = np.array([0, 0, 0, 0, turns.OVERLAP, turns.OVERLAP, 1, 1, 1, 1])
    assert turns.OVERLAP not in turns._absorb_short_runs(cells, 2, 3)
    longer = np.array([0, 0, 0, 0, *[turns.OVERLAP] * 3, 1, 1, 1])
    assert (turns._absorb_short_runs(longer, 2, 3) == turns.OVERLAP).sum() == 3


# ---- the stage in the workflow: a long_form dataset to verified Shar --------------------------


def run_long_form(tmp):
    """The workflow over a long_form dataset: two recordings of 1.5-2 minutes (the corpus's voices)
    and one that cannot be read, listed with a language and the known names of one's speakers; the
    segments transcribed by a random ASR (no quality filter: its text is random letters). Returns
    (work dir, corpus folder, listing)."""
    from testkit import LONG_RUN, demo_config, run_snakemake, write_jsonl

    root = tmp / "recordings"
    paths = write_corpus(root, recordings=2, minutes=(1.5, 2.0), seed=7)
    (root / "broken.flac").write_bytes(b"not audio at all")
    truth = json.loads(paths[0].with_suffix(".truth.json").read_text())
    first = list(dict.fromkeys(u["speaker"] for u in truth["utterances"]))
    listing = write_jsonl(
        tmp / "recordings.jsonl",
        [
            {"audio_filepath": paths[0].name, "speakers": first},
            {"audio_filepath": paths[1].name, "lang": "en"},
            {"audio_filepath": "broken.flac"},
        ],
    )
    config = demo_config(
        segment={
            "asr": {"random_from_config": str(REPO / "config/models/tiny_asr.yaml")},
            "link_similarity": 0.96,
        },
        quality={"filters": {}, "parts": 1},
        context={"parts": 1},
    )
    config["datasets"] = {
        "talks": {"format": "long_form", "audio_root": str(root), "manifest": str(listing), "language": "en"}
    }
    run_snakemake(tmp / "work", config, timeout=LONG_RUN)
    return tmp / "work", root, listing


def test_a_long_form_dataset_runs_the_workflow_to_verified_shar_that_magpietts_reads(long_form_run):
    """Every second of the recordings is kept in a segment or dropped with a reason; every segment is a
    record that prepare reads and that ends in a verified cut (or a reject), with the long file's span
    as its audio; NeMo's MagpieTTS dataset reads the Shar."""

    from lhotse import CutSet

    from testkit import magpie_dataset

    work, root, listing = long_form_run
    results = work / "results" / "talks"
    stats = json.loads((results / "segment" / "stats.json").read_text())
    assert stats["recordings"] == 3 and stats["segments"] > 5
    assert sum(stats["seconds"].values()) == pytest.approx(stats["seconds_in"], abs=1e-3)
    assert stats["seconds"]["kept"] > 0.5 * stats["seconds_in"]
    broken = next(r for r in stats["per_recording"] if r["recording"] == "broken.flac")
    assert broken["segments"] == 0 and set(broken["seconds"]) <= {"unreadable"}
    # every segment is a record of prepare, and every record is in a later stage or a reject
    counts = {
        stage: json.loads((results / stage / "stats.json").read_text())
        for stage in ("prepare", "text", "quality", "context")
    }
    assert counts["prepare"]["records_in"] == stats["segments"] == counts["prepare"]["records_out"]
    for before, after in (("prepare", "text"), ("text", "quality"), ("quality", "context")):
        assert counts[after]["records_in"] == counts[before]["records_out"]
        assert counts[after]["records_in"] == counts[after]["records_out"] + sum(
            counts[after]["rejected"].values()
        )
    card = (results / "DATASET.md").read_text()
    assert "## Cut from long recordings" in card and f"{stats['segments']:,} segments keep" in card
    summary = (work / "results" / "report" / "summary.html").read_text()
    assert "Cut from long recordings" in summary and f"{stats['segments']:,} segments keep" in summary
    verify = json.loads((results / "verify.json").read_text())
    assert verify["ok"] and verify["cuts"] == counts["context"]["records_out"] > 0
    # the cuts: spans of the long files, speakers by the listing's names or the recording's own
    fields = {f: data_files(results / "shar" / f) for f in ("cuts", "target_audio", "context_audio")}
    cuts = list(CutSet.from_shar(fields=fields))
    segments = [json.loads(x) for x in (results / "segment" / "manifest.jsonl").read_text().splitlines()]
    durations = sorted(s["duration"] for s in segments)
    named = set(json.loads(listing.read_text().splitlines()[0])["speakers"])
    # linked by voice: the second recording's speakers whom the first names take those names
    truth = json.loads((root / "rec_001.truth.json").read_text())
    second = [s for s in segments if s["audio_filepath"] == "rec_001.flac"]
    for s in second:
        true = true_speaker(truth, s["offset"], s["offset"] + s["duration"])
        name = s["speaker"].split("Speaker:")[1].strip(" |")
        assert name == true if true in named else name.startswith("rec_001-"), (name, true)
    assert any(true_speaker(truth, s["offset"], s["offset"] + s["duration"]) in named for s in second)
    assert stats["linked"] > 0 and stats["speakers"] < sum(r["speakers"] for r in stats["per_recording"])
    assert len(cuts) == verify["cuts"]
    for c in cuts:
        assert c.target_audio.load_audio().shape[-1] == c.target_audio.num_samples
        assert min(abs(c.duration - d) for d in durations) < 1e-3  # a segment's span
        speaker = c.supervisions[0].speaker.split("Speaker:")[1].strip(" |")
        assert speaker in named or speaker.startswith("rec_001-"), speaker
    codes = {
        f: data_files(results / "shar" / "codes_tiny_nemo" / f) for f in ("target_codes", "context_codes")
    }
    batch = magpie_dataset(load_16khz_audio=True)[CutSet(list(CutSet.from_shar(fields=fields | codes))[:4])]
    assert batch["audio_codes"].shape[:2] == (min(4, len(cuts)), 8)


def test_recordings_come_from_the_root_or_a_listing_and_bad_lines_are_named(tmp_path):
    from sharflow.core.errors import SharflowError
    from sharflow.segment.dataset import list_recordings, plan_segments, planned
    from testkit import write_jsonl, write_tone

    root = tmp_path / "audio"
    for name, seconds in (("a.flac", 3.0), ("sub/b.wav", 1.0), ("c.flac", 2.0)):
        write_tone(root / name, seconds)
    (root / "d.flac").write_bytes(b"broken")
    found = list_recordings(str(root), None, "de")
    assert [r.path for r in found] == ["a.flac", "c.flac", "d.flac", "sub/b.wav"]
    assert {r.language for r in found} == {"de"}
    plan = plan_segments(found, str(root), 2, str(tmp_path / "plan.json"))
    assert [r["duration"] for r in plan["recordings"]] == [3.0, 2.0, 0.0, 1.0]  # d.flac: unreadable
    assert sorted(i for part in plan["parts"] for i in part) == [0, 1, 2, 3]
    assert sorted(sum(plan["recordings"][i]["duration"] for i in part) for part in plan["parts"]) == [
        3.0,
        3.0,
    ]
    again = planned(str(tmp_path / "plan.json"))
    assert [r.path for r in again] == [r.path for r in found] and all(r.stamp for r in again)
    # a file replaced under its name gets another result name; its speakers keep theirs
    write_tone(root / "a.flac", 2.5)
    plan_segments(found, str(root), 2, str(tmp_path / "p2.json"))
    replaced = planned(str(tmp_path / "p2.json"))
    assert replaced[0].result_name != again[0].result_name and replaced[0].key == again[0].key
    listing = write_jsonl(
        tmp_path / "list.jsonl",
        [
            {"audio_filepath": "c.flac", "lang": "fr", "speakers": ["ann", "bob"]},
            {"audio_filepath": "a.flac"},
        ],
    )
    listed = list_recordings(str(root), str(listing), "en")
    assert [(r.path, r.language, r.speakers) for r in listed] == [
        ("c.flac", "fr", ("ann", "bob")),
        ("a.flac", "en", ()),
    ]
    for line, error in (
        ("{not json", r"list\.jsonl, line 2: not a recording"),
        ('{"audio_filepath": "../x.flac"}', r"line 2: .*outside the audio root"),
        ('{"audio_filepath": "c.flac"}', r"line 2: c\.flac is listed twice"),
        ('{"audio_filepath": "a.flac", "speakers": "ann"}', r"line 2: .*speakers a list"),
    ):
        write_jsonl(listing, ['{"audio_filepath": "c.flac"}', line])
        with pytest.raises(SharflowError, match=error):
            list_recordings(str(root), str(listing), "en")
    with pytest.raises(SharflowError, match="no audio files"):
        list_recordings(str(tmp_path / "empty"), None, "en")


def test_recordings_in_tars_or_a_glob_are_segmented_in_place_and_prepared_as_spans_of_the_members(tmp_path):
    """A long_form dataset's manifest may name tars (a brace pattern, a folder of them, one tar: every
    audio member a recording, read inside the tar) or a glob of files under the root. A member is
    planned, segmented and prepared as the same file would be: the same segments, read in place."""
    import shutil
    import tarfile

    from sharflow.core.errors import SharflowError
    from sharflow.io import containers
    from sharflow.prepare.job import prepare_dataset
    from sharflow.segment.dataset import list_recordings, listing_form, plan_segments, planned
    from sharflow.segment.job import Recording, segment_one

    talks, root = REPO / "demo" / "longform", tmp_path / "root"
    (root / "tars").mkdir(parents=True)
    for i in range(2):  # each talk in a tar of its own, its truth beside it (not a recording)
        with tarfile.open(root / "tars" / f"talks-{i:06d}.tar", "w") as tar:
            for name in (f"talk_{i}.flac", f"talk_{i}.truth.json"):
                tar.add(talks / name, arcname=name)
    shutil.copytree(talks, root / "plain")
    members = ["tars/talks-000000.tar#talk_0.flac", "tars/talks-000001.tar#talk_1.flac"]
    for pattern in ("tars/talks-{000000..000001}.tar", "tars/", str(root / "tars")):
        assert listing_form(pattern) == "tars" or pattern == str(root / "tars")
    for pattern in ("tars/talks-{000000..000001}.tar", "tars/"):
        assert [r.path for r in list_recordings(str(root), pattern, "en")] == members
    assert [r.path for r in list_recordings(str(root), "tars/talks-000001.tar", "en")] == members[1:]
    assert listing_form("plain/*.flac") == "glob" and listing_form("list.jsonl") == "listing"
    assert [r.path for r in list_recordings(str(root), "**/talk_*.flac", "en")] == [
        "plain/talk_0.flac", "plain/talk_1.flac"
    ]  # fmt: skip
    found = list_recordings(str(root), "tars/", "en")
    plan = plan_segments(found, str(root), 1, str(tmp_path / "plan.json"))
    length = sf.info(talks / "talk_0.flac").duration
    assert plan["recordings"][0]["duration"] == pytest.approx(length, abs=1e-6)
    member = planned(str(tmp_path / "plan.json"))[0]
    assert member.stamp[1][-1] > 0  # the container's version and the member's place in it
    assert member.key.startswith("talk_0-") and member.key != Recording("plain/talk_0.flac").key
    # segmented inside the tar as the file itself is: the same segments and accounting
    segmenter = Segmenter()
    inside = segment_one(member, str(root), segmenter, None)
    alone = segment_one(Recording("plain/talk_0.flac"), str(root), segmenter, None)
    assert len(inside["segments"]) >= 4 and inside["speakers"] == 2
    assert {k: v for k, v in inside.items() if k != "recording"} == {
        k: v for k, v in alone.items() if k != "recording"
    }
    # prepare reads the segments as spans of the member, never extracted
    lines = [
        {"audio_filepath": member.path, "offset": x["offset"], "duration": x["duration"], "text": "a segment"}
        | {"speaker": f"talk_0-{x['speaker']}"}
        for x in inside["segments"]
    ]
    manifest = tmp_path / "segments.jsonl"
    manifest.write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = prepare_dataset(
        str(manifest), prepared=str(tmp_path / "p.jsonl"), rejected_dir=str(tmp_path / "rej"),
        stats=str(tmp_path / "p.json"), dataset="talks", audio_root=str(root),
    )  # fmt: skip
    assert summary["records_out"] == len(lines), summary
    assert containers.split_member(json.loads((tmp_path / "p.jsonl").read_text().splitlines()[0])[
        "audio_filepath"
    ])[1] == "talk_0.flac"  # fmt: skip
    # named errors: a glob or tars outside the root, tars with no audio
    with tarfile.open(root / "tars" / "notes.tar", "w") as tar:
        tar.add(talks / "talk_0.truth.json", arcname="notes.json")
    for pattern, error in (
        ("../*.flac", "relative to its audio_root"),
        (str(tmp_path / "elsewhere.tar"), "outside the audio root"),
        ("tars/notes.tar", "no recordings"),
    ):
        (tmp_path / "elsewhere.tar").write_bytes((root / "tars" / "notes.tar").read_bytes())
        with pytest.raises(SharflowError, match=error):
            list_recordings(str(root), pattern, "en")


def test_a_long_form_config_without_an_asr_or_with_a_recipe_is_refused():
    from sharflow.core.config import validate_config
    from sharflow.core.errors import SharflowError
    from testkit import demo_config

    schema = REPO / "config" / "schema.yaml"
    config = demo_config()
    config.pop("segment", None)  # the shipped config's ASR for its own talks
    config["datasets"]["talks"] = {"format": "long_form", "audio_root": "/data/talks"}
    with pytest.raises(
        SharflowError, match=r"datasets\.talks: a long_form dataset's segments are transcribed"
    ):
        validate_config(config, schema)
    config["datasets"]["talks"]["require_text"] = False
    validate_config(config, schema)  # audio-only: no transcripts needed
    config["datasets"]["talks"]["recipe"] = "vctk"
    config["segment"] = {"min_segment": 40.0}
    with pytest.raises(SharflowError, match=r"(?s)min_segment: must be less.*not a recipe"):
        validate_config(config, schema)


SEGMENT_KEYS = {  # segment.<key>: a value other than the default
    "min_pause": 0.6,
    "max_pause": 0.3,
    "min_segment": 6.0,
    "max_segment": 5.0,
    "cluster_similarity": 0.5,
    "min_speaker_seconds": 60.0,
    "attribute_similarity": 0.95,
    "overlap_share": 0.9,
    "min_overlap": 4.0,  # the minute's 2.1 s of overlap absorbed by its neighbours
}


def test_each_threshold_of_the_segment_block_changes_the_segments(corpus):
    """Each key of the config's segment block reaches the step it names (settings_of) and changes the
    first minute's segments or their accounting. (min_confidence: test_asr; parts, workers, device:
    the same manifest for any parts and ranks, above.)"""
    import dataclasses

    import yaml

    from sharflow.segment.dataset import settings_of

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())["properties"]["segment"]
    defaults = {k: v["default"] for k, v in schema["properties"].items() if k != "asr"}
    audio = sf.read(corpus[0], dtype="float32")[0][: 60 * R]
    segmenter = Segmenter()

    def run(block):
        settings = settings_of(block, None)
        segmenter.turns, segmenter.cut = settings.turns, settings.cut
        result = segmenter.segment(audio)
        return result.segments, result.stretches

    base = run(defaults)
    assert len(base[0]) >= 3  # what is compared: several segments of more than one speaker
    assert len({k for _, _, k in base[0]}) > 1
    analysis = segmenter.analyse(audio)  # the models' part, as the explorer keeps it to try thresholds
    for key, value in SEGMENT_KEYS.items():
        block = defaults | {key: value}
        where = settings_of(block, None)
        assert (
            value in dataclasses.asdict(where.turns).values()
            or value in dataclasses.asdict(where.cut).values()
        )
        found = run(block)
        assert found != base, key
        if key in MADE_BY:  # the models' part depends on it: an analysis made without it is refused
            with pytest.raises(ValueError, match="analysis was made with"):
                decide(analysis, where.turns, where.cut)
            continue
        tried = decide(analysis, where.turns, where.cut)  # no model: the same as the whole run
        assert (tried.segments, tried.stretches) == found, key


def test_speakers_are_linked_across_recordings_by_voice_as_the_truth_has_them(segmented):
    """At link_similarity 0.96 each true voice is one name over the four recordings and two voices
    never share one (by a probe by hand on the corpus's voices: the same voice in two recordings
    0.97-1.0 alike, two voices at most 0.95, its ALIKE pair)."""
    from sharflow.segment.link import Linker

    _, results = segmented
    rows = []  # (recording, true voice, voice)
    for path, _, result in results:
        truth = json.loads(path.with_suffix(".truth.json").read_text())
        for k, voice in enumerate(result.voices):
            spans = [(a / R, b / R) for a, b, label in result.segments if label == k]
            votes = [true_speaker(truth, a, b) for a, b in spans]
            rows.append((path.name, max(set(votes), key=votes.count), voice))
    voices = {v for _, v, _ in rows}
    assert len(rows) > len(voices) > 2  # what is compared: voices met in more than one recording
    linker, names = Linker(0.96), []
    for name in dict.fromkeys(r for r, _, _ in rows):
        mine = [(i, row) for i, row in enumerate(rows) if row[0] == name]
        own = [f"{name}-s{k}" for k in range(len(mine))]
        names += linker.recording(np.stack([row[2] for _, row in mine]), own, [False] * len(mine))
    pairs = list(itertools.combinations(range(len(rows)), 2))
    assert all((names[i] == names[j]) == (rows[i][1] == rows[j][1]) for i, j in pairs)
    assert len(set(names)) == len(voices) and linker.linked == len(rows) - len(voices)
    counted = link_pairs([v for _, v, _ in rows], names)
    assert counted["right"] > 0 and counted["wrong"] == counted["missed"] == 0
    assert link_pairs(["a", "a", "b"], ["x", "y", "y"]) == {"right": 0, "wrong": 1, "missed": 1}


def test_a_linked_speaker_keeps_a_given_name_and_one_recordings_speakers_stay_apart():
    from sharflow.segment.link import Linker

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=256), rng.normal(size=256)
    near = lambda v: v + 0.05 * rng.normal(size=256)  # noqa: E731
    linker = Linker(0.9)
    assert linker.recording(np.stack([a, b]), ["r1-s0", "r1-s1"], [False, False]) == ["r1-s0", "r1-s1"]
    # a known name is kept, and an earlier voice alike to it does not take it over
    assert linker.recording(np.stack([near(a)]), ["alice"], [True]) == ["alice"]
    # two speakers of one recording alike to one voice: the first takes it, the other keeps its own
    assert linker.recording(np.stack([near(b), near(b)]), ["r3-s0", "r3-s1"], [False, False]) == [
        "r1-s1",
        "r3-s1",
    ]
    assert linker.linked == 1
    assert linker.recording(np.stack([near(a)]), ["r4-s0"], [False]) in (["r1-s0"], ["alice"])


def test_the_card_and_the_report_say_where_every_second_went():
    from sharflow.dataset.tables import segment_section
    from sharflow.segment.summary import segment_lines

    stats = {
        "recordings": 3,
        "segments": 12,
        "seconds_in": 7200.0,
        "seconds": {"kept": 5400.0, "silence": 1800.0, "overlap": 0.0},
        "speakers": 4,
        "linked": 2,
    }
    lines = segment_lines(stats)
    assert lines == [
        "3 recordings, 2.000 hours: 12 segments keep 1.500 h (75.0 %)",
        "dropped: silence 0.500 h (25.0 %)",
        "4 speakers, 2 of them linked across recordings by voice",
    ]
    assert segment_section(stats)[:3] == ["## Cut from long recordings", "", f"- **{lines[0]}**"]
    assert segment_section(None) == []
    empty = segment_lines(stats | {"seconds_in": 0.0, "seconds": {"kept": 0.0}, "linked": 0})
    assert empty[1] == "dropped: nothing" and empty[2] == "4 speakers"


def test_recordings_under_an_s3_prefix_are_listed_once_and_planned_by_their_etags(s3, tmp_path):
    from sharflow.io import storage
    from sharflow.segment.dataset import list_recordings, plan_segments
    from testkit import write_tone

    root = s3.bucket("longform") + "/talks"
    client = storage.client()
    for key, seconds in (("talks/a.flac", 2.0), ("talks/sub/b.WAV", 1.0)):
        client.put_object(Bucket="longform", Key=key, Body=write_tone(tmp_path / key, seconds).read_bytes())
    client.put_object(Bucket="longform", Key="talks/notes.txt", Body=b"not a recording")
    with storage.RequestCount() as requests:
        found = list_recordings(root, None, "en")
    assert [r.path for r in found] == ["a.flac", "sub/b.WAV"] and requests.total == 1  # one listing
    plan = plan_segments(found, root, 1, str(tmp_path / "plan.json"))
    etag = client.head_object(Bucket="longform", Key="talks/a.flac")["ETag"].strip('"')
    assert [r["duration"] for r in plan["recordings"]] == [2.0, 1.0]
    assert plan["recordings"][0]["stamp"][1] == etag
    # recordings in a tar on the bucket: its members, probed by range and stamped by the tar's ETag
    import tarfile

    with tarfile.open(tmp_path / "t.tar", "w") as tar:
        tar.add(tmp_path / "talks/a.flac", arcname="x/a.flac")
        tar.add(tmp_path / "talks/sub/b.WAV", arcname="b.wav")
    body = (tmp_path / "t.tar").read_bytes()
    client.put_object(Bucket="longform", Key="talks/tars/t-000000.tar", Body=body)
    found = list_recordings(root, "tars/t-{000000..000000}.tar", "en")
    assert [r.path for r in found] == ["tars/t-000000.tar#b.wav", "tars/t-000000.tar#x/a.flac"]
    plan = plan_segments(found, root, 1, str(tmp_path / "tars.json"))
    etag = client.head_object(Bucket="longform", Key="talks/tars/t-000000.tar")["ETag"].strip('"')
    assert [r["duration"] for r in plan["recordings"]] == [1.0, 2.0]
    assert all(r["stamp"][1][1] == etag for r in plan["recordings"])
