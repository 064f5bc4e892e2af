"""The quality stage's optional ASR check: text normalization, error rates against an independent
edit distance, NeMo's real ASR loading and transcription path (a tiny random CTC model), the filter."""

import json
import logging

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharflow.core.config import validate_config
from sharflow.core.errors import SharflowError
from sharflow.core.jsonl import merge_by_line
from sharflow.core.metrics import MEASURED as METRICS
from sharflow.core.metrics import TEXT_METRICS
from sharflow.io.audio import load_span, resample
from sharflow.models.asr import Transcriber
from sharflow.quality.filter import with_metrics
from sharflow.quality.part import AsrOptions, MeasureSettings, measure_records
from sharflow.quality.text import asr_fields, error_rates, normalize_text, reference_text
from sharflow.report.quality_costs import quality_view
from sharflow.work.ranks import Rank
from testkit import DEMO, REPO, demo_config, prepare_demo, run_quality_filter


def edit_distance(a: list, b: list) -> int:
    """Levenshtein distance, the textbook dynamic programme (shares nothing with jiwer)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[-1]


def test_text_normalization():
    assert normalize_text("Hello, World!") == "hello world"
    assert normalize_text("Don't—stop, NOW.") == "don't stop now"  # the docs' example (quality page)
    assert normalize_text("  Don't\tstop—now. ") == "don't stop now"
    assert normalize_text("'Quoted' rock'n'roll's") == "quoted rock'n'roll's"  # edge apostrophes go
    assert normalize_text("Ｆｕｌｌ ｗｉｄｔｈ") == "full width"  # NFKC
    assert normalize_text("Straße CAFÉ") == "strasse café"  # case folded
    assert normalize_text("Room 101, 2nd floor") == "room 101 2nd floor"  # digits kept
    assert normalize_text("... -- !") == ""
    assert normalize_text("'Xerox' box x") == "xerox box x"  # only apostrophes leave a word's edges
    assert reference_text({"text": "A", "normalized_text": "b"}) == "b"
    assert reference_text({"text": "A", "normalized_text": ""}) == "A"


def test_asr_fields_round_the_rates_and_keep_nothing_as_null():
    fields = asr_fields({"text": "abc def ghi"}, "abc dxf")
    assert fields == {"asr_text": "abc dxf", "cer": round(5 / 11, 6), "wer": round(2 / 3, 6)}
    assert asr_fields({"text": "abc"}, "abd") == {"asr_text": "abd", "cer": 0.333333, "wer": 1.0}
    assert asr_fields({"text": "?!"}, "anything") == {"asr_text": "anything", "cer": None, "wer": None}
    assert asr_fields({"text": ""}, "hi") == {"asr_text": "hi", "cer": None, "wer": None}
    assert asr_fields({}, "hi")["cer"] is None  # no text at all: nothing to score against


def test_error_rates_by_hand():
    assert error_rates("abc", "abd") == {"cer": pytest.approx(1 / 3), "wer": 1.0}
    assert error_rates("the cat sat", "the cat") == {
        "cer": pytest.approx(4 / 11),
        "wer": pytest.approx(1 / 3),
    }
    assert error_rates("Hello, world.", "hello world") == {"cer": 0.0, "wer": 0.0}
    assert error_rates("hello", "") == {"cer": 1.0, "wer": 1.0}
    assert error_rates("a", "a b c") == {"cer": 4.0, "wer": 2.0}  # insertions: above 1
    assert error_rates("?!", "anything") == {"cer": None, "wer": None}  # nothing to score against


@given(
    st.text(alphabet="ab c.,'A", max_size=14),
    st.text(alphabet="ab c.,'B", max_size=14),
)
def test_error_rates_equal_an_independent_edit_distance(reference, hypothesis):
    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    rates = error_rates(reference, hypothesis)
    if not ref:
        assert rates == {"cer": None, "wer": None}
        return
    assert rates["cer"] == pytest.approx(edit_distance(list(ref), list(hyp)) / len(ref))
    assert rates["wer"] == pytest.approx(edit_distance(ref.split(), hyp.split()) / len(ref.split()))


def _demo_waves(n: int):
    records = [json.loads(x) for x in (DEMO / "manifest.json").read_text().splitlines()[:n]]
    return records, [
        resample(
            *load_span(str(DEMO / "audio" / r["audio_filepath"]), r.get("offset", 0.0), r["duration"]), 16000
        )
        for r in records
    ]


def test_tiny_model_transcribes_through_nemo_and_says_it_is_random(tiny_asr, caplog):
    with caplog.at_level(logging.WARNING, logger="sharflow.models.asr"):
        transcriber = Transcriber(str(tiny_asr), "cpu", random=True)
    assert "RANDOMLY INITIALISED" in caplog.text
    assert transcriber.sample_rate == 16000
    assert transcriber.decoding == "greedy_batch"  # its config says greedy: the same argmax, batched
    records, waves = _demo_waves(6)
    batch = transcriber.transcribe(waves)
    assert len(set(batch)) == 6 and all(batch)  # each clip its own transcript: the outputs carry information
    assert [transcriber.transcribe([w])[0] for w in waves] == batch  # padding in a batch changes nothing
    assert transcriber.transcribe_sorted(waves, batch_seconds=5.0) == batch  # in batches sorted by length
    cers = [error_rates(reference_text(r), t)["cer"] for r, t in zip(records, batch, strict=True)]
    assert len(set(cers)) == 6
    assert transcriber.transcribe([]) == []


def test_transcripts_come_with_nemos_token_confidence_independent_of_the_batch(tiny_asr):
    transcriber = Transcriber(str(tiny_asr), "cpu", random=True, confidence=True)
    _, waves = _demo_waves(4)
    scored = transcriber.transcribe_scored(waves)
    texts = [t for t, _ in scored]
    assert texts == Transcriber(str(tiny_asr), "cpu", random=True).transcribe(waves)  # the same decoding
    confidences = [c for _, c in scored]
    assert all(0 < c <= 1 for c in confidences) and len(set(confidences)) == 4  # they carry information
    alone = [transcriber.transcribe_scored([w])[0] for w in waves]
    assert [t for t, _ in alone] == texts
    np.testing.assert_allclose([c for _, c in alone], confidences, atol=1e-5)
    noise = np.random.default_rng(0).normal(0, 0.3, 16000 * 3).astype(np.float32)
    assert transcriber.transcribe_scored([noise])[0][1] != confidences[0]
    assert transcriber.transcribe_scored([]) == []
    with pytest.raises(ValueError, match="confidence=True"):
        Transcriber(str(tiny_asr), "cpu").transcribe_scored(waves)


def test_a_model_that_does_not_load_is_named():
    with pytest.raises(
        SharflowError, match=r"could not load the NeMo ASR model '/no/such\.nemo'.*local \.nemo"
    ):
        Transcriber("/no/such.nemo")


def test_asr_fields_do_not_depend_on_batches_or_ranks(tiny_asr, tmp_path):
    """6 demo records: one rank, one record per batch; and two ranks (odd and even lines), one batch
    each, merged as a part merges them. Ranks run here in-process (spawning them: test_quality)."""
    prep = prepare_demo(tmp_path)
    prepared = prep / "prepared.jsonl"
    lines = [x for x in prepared.read_text().splitlines() if json.loads(x)["duration"] < 3.2][:6]
    prepared.write_text("\n".join(lines) + "\n")
    offsets = [(n, prepared.read_bytes().index(raw.encode())) for n, raw in enumerate(lines, start=1)]

    def rank(name: str, mine: list, batch_seconds: float) -> str:
        (tmp_path / name).mkdir()
        rank = Rank(0, "cpu", str(tmp_path / name))
        asr = AsrOptions(str(tiny_asr), batch_seconds=batch_seconds, random=True)
        measure_records(rank, mine, str(prepared), MeasureSettings(str(DEMO / "audio"), 1, asr))
        return rank.file(".jsonl")

    alone = (tmp_path / rank("alone", offsets, 0.1)).read_text()
    split = "".join(merge_by_line([rank("odd", offsets[0::2], 60.0), rank("even", offsets[1::2], 60.0)]))
    rows = [json.loads(x) for x in alone.splitlines()]
    assert [list(r)[-4:] for r in rows] == [["asr_text", "cer", "wer", "key"]] * 6
    assert all(set(METRICS) <= set(r) for r in rows)
    assert len({r["asr_text"] for r in rows}) == 6
    for r, raw in zip(rows, lines, strict=True):  # the rates are those of the transcript written
        expected = error_rates(reference_text(json.loads(raw)), r["asr_text"])
        assert (r["cer"], r["wer"]) == (round(expected["cer"], 6), round(expected["wer"], 6))
    assert alone == split


def test_a_manifest_cer_moves_aside_only_when_the_asr_check_ran():
    record = {"text": "a", "cer": 0.02, "asr_text": "theirs"}
    signal = dict.fromkeys(METRICS, 1.0)
    assert with_metrics(record, signal) == {**record, **signal}  # no check: NeMo's max_cer reads theirs
    measured = with_metrics(record, {**signal, "asr_text": "ours", "cer": 0.5, "wer": 1.0})
    assert (measured["cer"], measured["manifest_cer"]) == (0.5, 0.02)
    assert (measured["asr_text"], measured["manifest_asr_text"]) == ("ours", "theirs")
    assert measured["wer"] == 1.0 and "manifest_wer" not in measured


def _files(tmp, cers):
    tmp.mkdir(exist_ok=True)
    prepared, metrics, stats = tmp / "prepared.jsonl", tmp / "metrics.jsonl", tmp / "stats.json"
    with open(prepared, "w") as p, open(metrics, "w") as m:
        for line, cer in enumerate(cers, start=1):
            p.write(json.dumps({"audio_filepath": f"{line}.wav", "duration": 1.0, "text": "x"}) + "\n")
            asr = {} if cer == "absent" else {"asr_text": "x", "cer": cer, "wer": cer}
            m.write(json.dumps({"line": line, **dict.fromkeys(METRICS, 1.0), **asr}) + "\n")
    stats.write_text(json.dumps({"records_out": len(cers)}))
    return prepared, metrics, stats


def test_a_cer_filter_drops_at_its_threshold_and_needs_the_asr_check(tmp_path):
    files = _files(tmp_path, [0.03, 0.0300001, None, 0.0])
    summary, _, rejected = run_quality_filter(tmp_path, *files, "drop", {"cer": {"max": 0.03}})
    assert summary["rejected"] == {"quality_cer": 2} and summary["records_out"] == 2
    details = [json.loads(x)["detail"] for x in (rejected / "quality_cer.jsonl").read_text().splitlines()]
    assert details == ["cer 0.0300001 > max 0.03", "cer not measurable (null); thresholds {'max': 0.03}"]
    with pytest.raises(SharflowError, match=r"quality.filters.cer: .* holds no cer.*set quality.asr.model"):
        run_quality_filter(tmp_path, *_files(tmp_path / "absent", ["absent"]), "drop", {"cer": {"max": 0.03}})

    # the report's quality view: cer and wer get histograms when measured (a null counted apart)
    view = quality_view("t", str(files[0]), str(files[1]), {"filters": {}, "action": "drop"}, bins=4)
    assert {"cer", "wer"} <= set(view.histograms) and view.histograms["cer"].null_seconds == 1.0
    assert view.histograms["cer"].seconds.sum() == 3.0
    absent = _files(tmp_path / "absent", ["absent"])
    view = quality_view("t", str(absent[0]), str(absent[1]), {"filters": {}, "action": "drop"}, bins=4)
    assert set(view.histograms) == {*METRICS, *TEXT_METRICS}  # without the ASR check: no cer, wer


def test_config_refuses_a_cer_filter_without_the_asr_check_and_two_models():
    config = demo_config(quality={"filters": {"wer": {"max": 0.1}}})
    with pytest.raises(SharflowError, match=r"quality.filters.wer: wer is measured by the ASR check"):
        validate_config(config, REPO / "config" / "schema.yaml")
    config = demo_config(quality={"filters": {"wer": {"max": 0.1}}, "asr": {"model": "x.nemo"}})
    assert validate_config(config, REPO / "config" / "schema.yaml")["quality"]["asr"]["batch_seconds"] == 60
    config = demo_config(quality={"asr": {"model": "x.nemo", "random_from_config": "y.yaml"}})
    with pytest.raises(SharflowError, match=r"quality\.asr: give model or random_from_config, not both"):
        validate_config(config, REPO / "config" / "schema.yaml")


def test_a_recordings_segments_get_transcripts_and_the_least_confident_are_dropped(tiny_asr):
    from sharflow.segment.recording import KEPT, Segmented
    from sharflow.segment.transcripts import transcribe

    transcriber = Transcriber(str(tiny_asr), "cpu", random=True, confidence=True)
    _, waves = _demo_waves(4)
    gap = np.zeros(8000, np.float32)
    audio = np.concatenate([x for w in waves for x in (w, gap)])
    segments, stretches, at = [], [], 0
    for k, w in enumerate(waves):
        segments.append((at, at + len(w), k % 2))
        stretches += [(at, at + len(w), KEPT), (at + len(w), at + len(w) + len(gap), "silence")]
        at += len(w) + len(gap)
    result = Segmented(len(audio), 2, segments, stretches)
    everything = transcribe(audio, result, transcriber, min_confidence=0.0, batch_seconds=1.0)
    assert everything.segments == segments and len(everything.transcripts) == 4
    assert [t for t, _ in everything.transcripts] == transcriber.transcribe(waves)
    confidences = sorted(c for _, c in everything.transcripts)
    threshold = (confidences[1] + confidences[2]) / 2  # two above, two under
    some = transcribe(audio, result, transcriber, min_confidence=threshold)
    assert len(some.segments) == 2 and all(c >= threshold for _, c in some.transcripts)
    seconds, before = some.seconds(), result.seconds()
    assert seconds["low_confidence"] > 0
    assert seconds["kept"] + seconds["low_confidence"] == pytest.approx(before["kept"], abs=1e-9)
    assert sum(seconds.values()) == pytest.approx(len(audio) / 16000, abs=1e-9)
