"""The explorer over a long_form dataset (issue 75): each recording's timeline read from the segment
stage's results (every stretch, the segments' speakers as the manifest names them), any stretch
played from the long file, and thresholds tried on a recording before a run, by the real server over
the session's long_form run and in the real Chromium."""

import io
import json
import os
from pathlib import Path
from urllib.parse import urlencode

import pytest
import soundfile as sf
import yaml
from test_explore import SCREENSHOTS, browsing, get, loaded, running, snapshot, wait_for

from testkit import read_jsonl


def ask(server, path: str, **query):
    status, body = get(server, f"{path}?{urlencode(query)}")
    return status, (json.loads(body) if body[:1] in (b"{", b"[") else body)


def answer(server, path: str, **query):
    status, body = ask(server, path, **query)
    assert status == 200, (path, query, status, body)
    return body


@pytest.fixture(scope="module")
def long_form(long_form_run):
    work = long_form_run[0]
    config = yaml.safe_load((work / "config.yaml").read_text())
    segment = work / "results" / "talks" / "segment"
    stats = json.loads((segment / "stats.json").read_text())
    return work, config, stats, read_jsonl(segment / "manifest.jsonl")


def test_each_recordings_timeline_covers_it_names_its_speakers_and_plays_any_stretch(long_form):
    work, config, stats, manifest = long_form
    before = snapshot(work)
    with running(work, config) as server:
        assert {d["name"]: d["long_form"] for d in answer(server, "/api/datasets")} == {"talks": True}
        listed = answer(server, "/api/recordings", dataset="talks")
        assert listed["total"] == 3 and [r["recording"] for r in listed["rows"]] == [
            r["recording"] for r in stats["per_recording"]
        ]
        lines = iter(manifest)
        for n, row in enumerate(stats["per_recording"]):
            found = answer(server, "/api/timeline", dataset="talks", n=n)
            stretches = found["stretches"]
            if not row["duration"]:  # broken.flac: unreadable, of no length its header could give
                assert stretches == [] and found["error"] and not any(row["seconds"].values())
                continue
            # the stretches cover the recording, in order, and add up to the stage's own accounting
            assert [s["start"] for s in stretches[1:]] == [s["end"] for s in stretches[:-1]]
            assert stretches[0]["start"] == 0 and stretches[-1]["end"] == pytest.approx(row["duration"])
            for what, seconds in row["seconds"].items():
                spent = sum(s["end"] - s["start"] for s in stretches if s["what"] == what)
                assert spent == pytest.approx(seconds, abs=1e-4), (n, what)
            # each kept stretch is the manifest's next segment: its span, its speaker's final name
            for s in (s for s in stretches if s["what"] == "kept"):
                line = next(lines)
                assert (line["offset"], line["duration"]) == pytest.approx(
                    (s["start"], s["end"] - s["start"])
                )
                assert line["speaker"].endswith(f"Speaker:{s['speaker']} |") and line["text"] == s["text"]
        assert next(lines, None) is None
        # a stretch plays from the long file: the span's length, to a sample
        first = next(
            s for s in answer(server, "/api/timeline", dataset="talks", n=0)["stretches"] if "text" in s
        )
        _, wav = ask(server, "/audio/recording", dataset="talks", n=0, start=first["start"], end=first["end"])
        audio, rate = sf.read(io.BytesIO(wav))
        assert abs(len(audio) / rate - (first["end"] - first["start"])) <= 1 / rate
        for query, status in (
            ({"dataset": "talks", "n": 3}, 404),
            ({"dataset": "nope", "n": 0}, 404),
            ({"dataset": "talks", "n": -1}, 400),
        ):
            assert ask(server, "/api/timeline", **query)[0] == status, query
        assert ask(server, "/audio/recording", dataset="talks", n=0, start=10**6, end=10**6 + 1)[0] == 400
    assert snapshot(work) == before  # looking changed nothing


def test_thresholds_tried_on_a_recording_cut_it_as_a_run_with_them_would(long_form):
    """A try with the run's own thresholds gives the run's own stretches (its low_confidence drops
    aside: a try makes no transcripts); other thresholds change the segments the way they should."""
    work, config, _, _ = long_form
    with running(work, config) as server:
        run = answer(server, "/api/timeline", dataset="talks", n=0)
        assert run["settings"] == {
            "max_pause": 1.5,
            "min_segment": 3.0,
            "max_segment": 30.0,
            "cluster_similarity": 0.8,
        }
        same = answer(server, "/api/try_segment", dataset="talks", n=0, **run["settings"])
        assert same["whole"] and same["speakers"] == run["speakers"]
        plain = ["kept" if s["what"] == "low_confidence" else s["what"] for s in run["stretches"]]
        assert [(s["start"], s["end"], s["what"]) for s in same["stretches"]] == [
            (s["start"], s["end"], w) for s, w in zip(run["stretches"], plain, strict=True)
        ]
        kept = [s for s in run["stretches"] if s["what"] == "kept"]
        assert len({s["label"] for s in kept}) > 1 and len(kept) > 3  # what is compared varies
        assert [s["label"] for s in same["stretches"] if "label" in s] == [s["label"] for s in kept]
        longer = answer(server, "/api/try_segment", dataset="talks", n=0, min_segment=12)
        assert longer["segments"] < same["segments"]
        assert longer["seconds"]["too_short"] > same["seconds"].get("too_short", 0)
        merged = answer(server, "/api/try_segment", dataset="talks", n=0, cluster_similarity=-1)
        assert merged["speakers"] == 1 < same["speakers"]
        pauses = answer(server, "/api/try_segment", dataset="talks", n=0, max_pause=0.0)
        assert pauses["segments"] != same["segments"]
        for query, status, says in (
            ({"min_segment": "abc"}, 400, "must be a number"),
            ({"min_segment": 100}, 400, "between 0 and 60"),
            ({"min_segment": 40, "max_segment": 20}, 400, "more than max_segment"),
            ({"n": 2}, 404, "cannot be read"),
        ):
            code, body = ask(server, "/api/try_segment", **({"dataset": "talks", "n": 0} | query))
            assert code == status and says in body["error"], (query, body)


def test_thresholds_are_tried_before_a_run_once_the_recordings_are_planned(long_form, tmp_path):
    """A folder where only the segment stage's plan is made (snakemake results/talks/segment/plan.json:
    the recordings' headers read, nothing segmented): the explorer lists the recordings and tries
    thresholds on them, as on the finished run."""
    import shutil

    work, config, stats, _ = long_form
    planned = tmp_path / "w"
    plan = planned / "results" / "talks" / "segment" / "plan.json"
    plan.parent.mkdir(parents=True)
    shutil.copy(work / "results" / "talks" / "segment" / "plan.json", plan)
    with running(planned, config) as server, running(work, config) as finished:
        [talks] = answer(server, "/api/datasets")
        assert talks["long_form"] and talks["rows"] == 0
        listed = answer(server, "/api/recordings", dataset="talks")
        assert not listed["segmented"] and listed["settings"]["min_segment"] == 3.0
        assert [(r["recording"], r["duration"]) for r in listed["rows"]] == [
            (r["recording"], r["duration"]) for r in stats["per_recording"]
        ]
        code, body = ask(server, "/api/timeline", dataset="talks", n=0)
        assert code == 404 and "not segmented yet" in body["error"]
        for asked in ({}, {"min_segment": 12, "cluster_similarity": 0.5}):
            tried = answer(server, "/api/try_segment", dataset="talks", n=0, **asked)
            assert tried == answer(finished, "/api/try_segment", dataset="talks", n=0, **asked)
            assert tried["segments"] > 0


def test_a_curator_opens_a_recordings_timeline_hears_a_stretch_and_tries_a_threshold(
    long_form, chromium, tmp_path
):
    work, config, _, manifest = long_form
    shots = Path(os.environ.get(SCREENSHOTS) or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with running(work, config) as server:
        expected = answer(server, "/api/try_segment", dataset="talks", n=0, min_segment=12)
        with browsing(chromium, server.url) as (page, errors):
            page.wait_for_selector("#recordings tbody tr", state="attached")  # on its hidden tab
            page.click("nav button[data-tab=recordings]")
            page.click("#recordings tbody tr[data-n='0']")
            wait_for(page, "document.querySelector('#recording-title').dataset.n === '0'")
            shown = page.eval_on_selector_all("#stretches li[data-what=kept]", "li => li.length")
            first = manifest[0]
            assert shown == sum(1 for line in manifest if line["audio_filepath"] == first["audio_filepath"])
            page.click("#stretches li[data-what=kept]")
            duration = loaded(page, "#stretch-audio")
            assert abs(duration - first["duration"]) <= 1 / 16000
            page.fill("#try-min_segment", "12")
            page.click("#try")
            wait_for(page, "document.querySelector('#try-info').dataset.segments !== undefined")
            assert int(page.get_attribute("#try-info", "data-segments")) == expected["segments"]
            page.screenshot(path=str(shots / "explore-recordings.png"))
            assert errors == []
