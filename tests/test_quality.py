"""The quality stage: real DNSMOS / Silero VAD weights on real audio, signal measures, the filter."""

import itertools
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import yaml
from scipy.signal import butter, sosfiltfilt

from sharflow.core.errors import SharflowError
from sharflow.core.metrics import MEASURED as METRICS
from sharflow.core.metrics import TEXT_METRICS
from sharflow.models.dnsmos import HOP, WINDOW, Dnsmos, DnsmosNet, engine_for, mos, tile, weights_path
from sharflow.models.vad import BLOCK, FRAME, GPU_DTYPE, GPU_ROWS, ROWS, SileroVad
from sharflow.quality.filter import failures, with_metrics
from sharflow.quality.merge import merge_quality
from sharflow.quality.metrics import (
    bandwidth_hz,
    clipping_fraction,
    loudness_lufs,
    speaking_rate,
    speech_measures,
)
from sharflow.quality.part import MeasureSettings, measure_records, run_quality_part
from sharflow.quality.reuse import kept_measures, measure_digest, record_key, reused_lines
from sharflow.work.parts import part_of, part_records
from testkit import (
    DEMO,
    REPO,
    data_files,
    measure_demo_part,
    prepare_demo,
    read_back,
    read_jsonl,
    run_quality_filter,
    write_all,
)


@pytest.fixture(scope="module")
def dnsmos():
    return Dnsmos("cpu")


@pytest.fixture(scope="module")
def vad():
    return SileroVad("cpu")


@pytest.fixture(scope="module")
def clean():
    """A demo utterance at 16 kHz (awb_000: 4.84 s, speech from ~0.2 s to the end)."""
    audio, rate = sf.read(DEMO / "audio" / "awb" / "awb_000.flac", dtype="float32")
    assert rate == 16000
    return audio


@pytest.fixture(scope="module")
def voices():
    """The first utterance of each demo voice at 16 kHz, and the demo's damaged copies of slt."""
    paths = [sorted(voice.iterdir())[0] for voice in sorted((DEMO / "audio").iterdir())]
    paths += sorted((DEMO / "degraded").glob("*.flac"))
    return [soxr.resample(*_mono(p), 16000).astype(np.float32) for p in paths]


def _mono(path):
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    return audio[:, 0], rate


def white_noise_at(audio: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    noise = np.random.default_rng(seed).standard_normal(len(audio)).astype(np.float32)
    noise *= np.sqrt(np.mean(audio**2) / np.mean(noise**2) / 10 ** (snr_db / 10))
    return np.clip(audio + noise, -1, 1)


def published_dnsmos(audio: np.ndarray) -> dict[str, float]:
    """The published P.835 pipeline, one clip at a time, one onnxruntime run per window: written here
    apart from sharflow's (the clip doubled until 9.01 s fit, windows every second while whole)."""
    import onnxruntime as ort

    session = ort.InferenceSession(weights_path(), providers=["CPUExecutionProvider"])
    while len(audio) < 144_160:
        audio = np.concatenate([audio, audio])
    raw = np.concatenate(
        [
            session.run(None, {"input_1": audio[s : s + 144_160][None]})[0]
            for s in range(0, len(audio) - 144_160 + 1, 16_000)
        ]
    ).astype(np.float64)
    polys = {
        "dnsmos_sig": (-0.08397278, 1.22083953, 0.0052439),
        "dnsmos_bak": (-0.13166888, 1.60915514, -0.39604546),
        "dnsmos_ovrl": (-0.06766283, 1.11546468, 0.04602535),
    }
    return {n: float(np.mean(np.polyval(p, raw[:, i]))) for i, (n, p) in enumerate(polys.items())}


def test_dnsmos_scores_noise_lower_and_equals_the_packages_own_function(dnsmos, clean):
    import speechmos.dnsmos

    noisy = white_noise_at(clean, 0.0)
    low_passed = sosfiltfilt(butter(10, 4000, fs=16000, output="sos"), clean).astype(np.float32)
    scores = dnsmos.score([clean, noisy, low_passed])
    assert scores[1]["dnsmos_ovrl"] < scores[0]["dnsmos_ovrl"] - 0.5
    assert scores[1]["dnsmos_bak"] < scores[0]["dnsmos_bak"] - 0.5
    # the package's own pipeline on the same 16 kHz arrays (one 9.01 s window each, clips repeated)
    for x, mine in zip((clean, noisy, low_passed), scores, strict=True):
        ref = speechmos.dnsmos.run(x, 16000)
        assert mine["dnsmos_sig"] == pytest.approx(ref["sig_mos"], abs=1e-3)
        assert mine["dnsmos_bak"] == pytest.approx(ref["bak_mos"], abs=1e-3)
        assert mine["dnsmos_ovrl"] == pytest.approx(ref["ovrl_mos"], abs=1e-3)


def test_dnsmos_runs_on_torch_on_a_gpu_and_on_onnxruntime_on_a_cpu(dnsmos, tmp_path):
    import onnx
    from onnx import numpy_helper

    assert engine_for("cuda:1") == engine_for("cuda") == "torch-cuda"
    assert engine_for("cpu") == dnsmos.engine == "onnxruntime-cpu"
    assert engine_for("cpu", "torch") == "torch-cpu"
    with pytest.raises(SharflowError, match="torch only"):
        Dnsmos("cuda:0", runtime="onnxruntime")
    # the torch modules are built only from the graph they spell out: another graph, or this one with
    # one of its constants changed, is refused by name
    assert isinstance(DnsmosNet.from_onnx(weights_path()), DnsmosNet)
    with pytest.raises(SharflowError, match=r"bak_ovr\.onnx is not the DNSMOS P\.835 graph"):
        DnsmosNet.from_onnx(weights_path().replace("sig_bak_ovr", "bak_ovr"))
    model = onnx.load(weights_path())
    base = next(t for t in model.graph.initializer if t.name == "mos_estimator_logpow/truediv/y:0")
    base.CopyFrom(numpy_helper.from_array(np.array(2.0, dtype=np.float32), base.name))
    onnx.save(model, tmp_path / "changed.onnx")
    with pytest.raises(SharflowError, match=r"changed\.onnx is not"):
        DnsmosNet.from_onnx(str(tmp_path / "changed.onnx"))


def test_dnsmos_on_torch_agrees_with_the_published_pipeline_whatever_shares_its_batch(dnsmos, voices):
    """The GPU's engine (DnsmosNet, the ONNX graph's own weights in torch), run here on the CPU: every
    metric within 0.005 of the published per-record onnxruntime pipeline for clips of 0.5 s to 30 s
    (every window), raw outputs within 1e-4 of onnxruntime's on the first window of demo damaged
    copies (noise, low-passed, clipped); and a clip's outputs are the same bytes alone as in the
    middle of a batch beside another clip's windows. Its clips' scores carry information."""
    on_torch = Dnsmos("cpu", runtime="torch", batch=2)
    speech = np.concatenate(voices[:7])
    mixed = [speech[:8_000], speech[16_000 : 16_000 + 152_000], speech[: 30 * 16_000]]
    tiled = [tile(clip) for clip in mixed]
    assert [t.count for t in tiled] == [7, 1, 21]
    raw = on_torch._run(tiled)
    alone = on_torch._run(tiled[1:2])  # the 8th window of the run above: 2nd of its batch, beside clip 1's
    assert (raw[7:8] == alone).all()
    references = [published_dnsmos(clip) for clip in mixed]
    starts = np.cumsum([0] + [t.count for t in tiled])
    torch_scores = [mos(raw[a:b]) for a, b in itertools.pairwise(starts)]
    for clip, mine, reference in zip(mixed, torch_scores, references, strict=True):
        for name, value in reference.items():
            assert mine[name] == pytest.approx(value, abs=0.005), (len(clip), name)
    assert len({round(s["dnsmos_ovrl"], 3) for s in torch_scores}) == len(mixed)
    # the CPU's engine: the graph itself, the same windows (a 0.5 s clip tiled to 16 s: 7 windows)
    assert dnsmos.score(mixed[:1])[0] == pytest.approx(references[0], abs=1e-6)
    damaged = [tile(voices[i], 1) for i in (7, 8, 11)]  # demo/degraded: noise_0db, lowpass_4khz, clipped
    raw_torch, raw_onnx = on_torch._run(damaged), dnsmos._run(damaged)
    assert np.abs(raw_torch - raw_onnx).max() < 1e-4
    assert len({round(float(r), 3) for r in raw_onnx[:, 2]}) == len(damaged)


def test_dnsmos_windows_follow_the_models_window_and_hop():
    short = tile(np.arange(50_000, dtype=np.float32))  # doubled until it fills a window: 200,000 samples
    assert short.count == 4 and len(short.audio) == 200_000
    assert [len(short.window(i)) for i in range(4)] == [WINDOW] * 4
    assert short.window(0)[50_000] == short.window(0)[100_000] == 0 and short.window(1)[0] == 16_000
    for seconds, count in ((9.01, 1), (10.0, 1), (10.0101, 2), (20.5, 12)):
        assert tile(np.zeros(int(round(seconds * 16000)), dtype=np.float32)).count == count, seconds
    for samples, count in ((WINDOW + HOP - 1, 1), (WINDOW + HOP, 2)):
        tiled = tile(np.zeros(samples))
        assert tiled.count == count and tiled.audio.dtype == np.float32
    ramp = np.arange(int(12.5 * 16000), dtype=np.float32)
    assert [tile(ramp).window(i)[0] for i in range(tile(ramp).count)] == [0, 16000, 32000, 48000]
    assert tile(ramp, max_windows=2).count == 2 and tile(ramp, max_windows=9).count == 4


def test_vad_measures_added_silence_and_none_in_zeros(vad, clean):
    def measures(audio):
        return speech_measures(vad.speech([audio])[0], len(audio), 16000)

    base = measures(clean)
    assert 0.5 < base["speech_ratio"] <= 1 and base["leading_silence"] < 0.5
    padded = measures(np.concatenate([np.zeros(24_000, np.float32), clean, np.zeros(16_000, np.float32)]))
    assert padded["leading_silence"] - base["leading_silence"] == pytest.approx(1.5, abs=0.2)
    assert padded["trailing_silence"] - base["trailing_silence"] == pytest.approx(1.0, abs=0.2)
    assert padded["speech_seconds"] == pytest.approx(base["speech_seconds"], abs=0.2)
    assert measures(np.zeros(32_000, np.float32)) == {
        "speech_ratio": 0.0,
        "leading_silence": 2.0,
        "trailing_silence": 2.0,
        "speech_seconds": 0.0,
    }


def test_vad_batched_equals_silero_own_forward_and_does_not_depend_on_its_batch(vad, voices):
    """Probabilities within 1e-4 of Silero's own frame-by-frame audio_forward (oneDNN's
    convolutions sum in another order for 1,024 frames than for one: up to 6e-6 apart with AVX2,
    4.2e-5 with AVX-512, in a probe by hand), and the same speech spans as its own
    get_speech_timestamps; for more clips than one LSTM pass takes and a clip longer than one feature
    block; the same bytes in any order of clips."""
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    rng = np.random.default_rng(3)
    speech = np.concatenate(voices[:7])
    clips = [
        speech[s : s + n]
        for s, n in zip(
            rng.integers(0, 16_000 * 20, ROWS + 3), rng.integers(600, 48_000, ROWS + 3), strict=True
        )
    ]
    clips.append(np.tile(speech, 2)[: (BLOCK + 40) * FRAME + 100])  # longer than one block of frames
    probs = vad.probabilities(clips)
    shuffled = rng.permutation(len(clips))
    again = vad.probabilities([clips[i] for i in shuffled])
    assert all((probs[i] == again[n]).all() for n, i in enumerate(shuffled))
    vad.rows = GPU_ROWS  # a GPU's LSTM pass takes more rows: a row's steps never see another row
    try:
        wide = vad.probabilities(clips)
    finally:
        vad.rows = ROWS
    assert all((p == w).all() for p, w in zip(probs, wide, strict=True))
    model = load_silero_vad()
    spans = vad.speech(clips)
    for clip, mine, found in zip(clips, probs, spans, strict=True):
        with torch.inference_mode():
            own = model.audio_forward(torch.from_numpy(clip)[None], 16000)[0].numpy()
        assert mine.shape == own.shape and np.abs(mine - own).max() < 1e-4
        expected = get_speech_timestamps(torch.from_numpy(clip), model, sampling_rate=16000)
        assert found == [(s["start"], s["end"]) for s in expected]
    assert sum(bool(s) for s in spans) > len(clips) // 2 and sum(not s for s in spans) >= 1


def test_vad_in_a_gpus_float64_gives_a_cpus_spans_and_its_bytes_do_not_depend_on_the_batch(vad, voices):
    """On a GPU the VAD runs in float64 (TF32 in float32 moved a demo utterance's span end by a frame
    on an H200): the same code in float64 here gives probabilities within float32's rounding of the
    CPU's float32 (not the same bytes: another computation), the same spans, and in any order of
    clips the same bytes."""
    import torch

    wide = SileroVad("cpu", dtype=torch.float64)
    assert wide.dtype == GPU_DTYPE == torch.float64 and vad.dtype == torch.float32
    clips = [v[: n * 4000] for v, n in zip(voices, range(3, 30), strict=False)]
    mine, narrow = wide.probabilities(clips), vad.probabilities(clips)
    assert all(p.dtype == np.float32 for p in mine)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(mine, narrow, strict=True))
    assert 0 < worst < 1e-4
    assert wide.speech(clips) == vad.speech(clips)
    assert sum(bool(s) for s in vad.speech(clips)) > len(clips) // 2
    again = wide.probabilities(clips[::-1])[::-1]
    assert all((a == b).all() for a, b in zip(mine, again, strict=True))


def test_a_gpu_ranks_side_by_side_models_give_what_one_after_the_other_gives(voices):
    """On a GPU a rank launches DNSMOS from a second thread while it runs the VAD
    (Meters.overlap); the scores and spans are those of the models run one after the other, which
    differ between clips (the comparison carries information)."""
    from sharflow.quality.rank import MeasureSettings, Meters

    meters = Meters("cpu", MeasureSettings("/", dnsmos_max_windows=1))
    assert not meters.overlap  # a CPU rank has one thread to give
    clips = voices[:3] + voices[-2:]
    alone = meters.scores_and_spans(clips)
    meters.overlap = True
    side_by_side = meters.scores_and_spans(clips)
    assert side_by_side == alone
    assert len({s["dnsmos_ovrl"] for s in alone[0]}) == len(clips) and len({str(s) for s in alone[1]}) > 1


def test_speech_measures_from_spans_exactly():
    assert speech_measures([(1600, 8000), (9600, 12800)], 16000, 16000) == {
        "speech_ratio": (6400 + 3200) / 16000,
        "leading_silence": 0.1,
        "trailing_silence": 0.2,
        "speech_seconds": 0.6,
    }
    assert speech_measures([(0, 16000)], 16000, 16000)["leading_silence"] == 0.0


def test_bandwidth_finds_a_4_khz_low_pass(clean):
    low_passed = sosfiltfilt(butter(10, 4000, fs=16000, output="sos"), clean)
    assert bandwidth_hz(clean, 16000) > 6500
    assert abs(bandwidth_hz(low_passed, 16000) - 4000) <= 500
    # the same speech resampled to 44.1 kHz holds nothing above the source's 8 kHz Nyquist
    assert bandwidth_hz(soxr.resample(clean, 16000, 44100), 44100) <= 8000
    assert bandwidth_hz(np.zeros(8000), 16000) == 0.0


def test_clipping_loudness_and_speaking_rate(clean):
    loud = np.clip(clean * 8, -1, 1)
    expected = np.count_nonzero(np.abs(clean * 8) >= 32767 / 32768) / len(clean)
    assert expected > 0.001 and clipping_fraction(loud) == expected
    assert clipping_fraction(clean) == 0.0
    level = loudness_lufs(clean, 16000)
    assert -40 < level < -10
    assert loudness_lufs(clean * 0.5, 16000) == pytest.approx(level - 20 * np.log10(2), abs=0.05)
    assert loudness_lufs(np.zeros(32_000), 16000) is None  # all below the absolute gate
    assert loudness_lufs(clean[:3000], 16000) is None  # shorter than one 400 ms block
    record = {"text": "Hello, world.", "normalized_text": "Hello,  world!"}
    assert speaking_rate(record, 2.0) == 5.5  # "hello world": 11 characters of normalized_text
    assert speaking_rate({"text": "A-b."}, 1.5) == 2.0  # "a b"
    assert speaking_rate(record, 0.0) is None
    assert speaking_rate(record, 0.5) == 22.0  # under a second of speech still has a rate


def test_measures_at_their_documented_edges(clean):
    full = 32767 / 32768
    assert (
        clipping_fraction(np.array([full, -full, 0.5, full - 1e-6], dtype=np.float32)) == 0.5
    )  # |x| >= full
    assert clipping_fraction(np.array([1.0], dtype=np.float32)) == 1.0
    assert clipping_fraction(np.array([], dtype=np.float32)) == 0.0
    assert loudness_lufs(clean[:6400], 16000) is not None  # exactly one 400 ms gating block is measurable
    assert loudness_lufs(clean[:6399], 16000) is None
    rate = 16000
    noise = (0.01 * np.random.default_rng(1).standard_normal(rate)).astype(np.float32)
    assert bandwidth_hz(noise, rate) == 8000.0  # flat to Nyquist: the top bin, 256 x 16000 / 512
    assert bandwidth_hz(noise, 22050) == 11025.0
    assert bandwidth_hz(noise[:300], rate) == 8000.0  # shorter than one FFT: zero-padded to 512
    assert bandwidth_hz(np.zeros(rate, dtype=np.float32), rate) == 0.0


def test_dnsmos_keeps_the_first_windows_it_is_told_to(dnsmos):
    noise = (0.1 * np.random.default_rng(2).standard_normal(16000 * 20)).astype(np.float32)
    noise[16000 * 10 :] *= 0.01  # a quieter second half: later windows score otherwise
    first = Dnsmos("cpu", max_windows=1)
    one_window = first(noise)
    assert one_window == first(noise[:WINDOW])  # exactly the first window's score
    assert one_window != dnsmos(noise)


# ---- the filter ---------------------------------------------------------------------------------


def test_every_failing_filter_is_named_after_a_null_one():
    filters = {"loudness_lufs": {"min": -30}, "clipping_fraction": {"max": 0.01}}
    assert [m for m, _ in failures({"loudness_lufs": None, "clipping_fraction": 0.5}, filters)] == [
        "loudness_lufs",
        "clipping_fraction",
    ]


def test_thresholds_pass_at_the_value_and_fail_on_the_wrong_side():
    filters = {"speech_ratio": {"min": 0.5}, "clipping_fraction": {"max": 0.01}}
    at = {"speech_ratio": 0.5, "clipping_fraction": 0.01}
    assert failures(at, filters) == []
    below = failures({"speech_ratio": 0.4999, "clipping_fraction": 0.01}, filters)
    assert below == [("speech_ratio", "speech_ratio 0.4999 < min 0.5")]
    above = failures({"speech_ratio": 0.5001, "clipping_fraction": 0.0101}, filters)
    assert above == [("clipping_fraction", "clipping_fraction 0.0101 > max 0.01")]
    both = failures({"speech_ratio": 0.1, "clipping_fraction": 0.2}, filters)
    assert [m for m, _ in both] == ["speech_ratio", "clipping_fraction"]  # in the filters' order
    assert failures({"speech_ratio": None, "clipping_fraction": 0}, filters)[0][0] == "speech_ratio"
    ranged = {"loudness_lufs": {"min": -35, "max": -15}}
    assert failures({"loudness_lufs": -35}, ranged) == failures({"loudness_lufs": -15}, ranged) == []
    assert len(failures({"loudness_lufs": -40}, ranged)) == len(failures({"loudness_lufs": -10}, ranged)) == 1


def _measured(n: int, tmp, *, error_at: int | None = None):
    """A prepared file of n records and its metrics file (speech_ratio = line / n)."""
    prepared, metrics, stats = tmp / "prepared.jsonl", tmp / "metrics.jsonl", tmp / "prepare_stats.json"
    with open(prepared, "w") as p, open(metrics, "w") as m:
        for line in range(1, n + 1):
            record = {"audio_filepath": f"a{line}.flac", "duration": float(line), "text": "x", "speaker": "s"}
            if line == 2:
                record["speech_ratio"] = 0.99  # a manifest's own value of a measured field
            p.write(json.dumps(record) + "\n")
            values = dict.fromkeys(METRICS, 1.0) | {"speech_ratio": line / n}
            m.write(
                json.dumps({"line": line, "error": "bad"} if line == error_at else {"line": line, **values})
                + "\n"
            )
    stats.write_text(json.dumps({"records_out": n}))
    return prepared, metrics, stats


def test_drop_rejects_with_reasons_and_mark_keeps_with_a_status(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sharflow")
    files = _measured(10, tmp_path, error_at=7)
    filters = {"speech_ratio": {"min": 0.5}}  # lines 1-4 fail (0.1 .. 0.4); 5 is at the threshold
    summary, kept, rejected = run_quality_filter(tmp_path, *files, "drop", filters)
    assert [r["duration"] for r in kept] == [5.0, 6.0, 8.0, 9.0, 10.0]
    assert summary["records_in"] == 10 and summary["records_out"] == 5
    assert summary["rejected"] == {"quality_speech_ratio": 4, "unreadable_audio": 1}
    assert summary["hours_in"] == round(55 / 3600, 6) and summary["hours_out"] == round(38 / 3600, 6)
    lines = [json.loads(x) for x in (rejected / "quality_speech_ratio.jsonl").read_text().splitlines()]
    assert [x["line"] for x in lines] == [1, 2, 3, 4]
    assert lines[0]["detail"] == "speech_ratio 0.1 < min 0.5"
    assert json.loads((rejected / "unreadable_audio.jsonl").read_text())["detail"] == "bad"
    assert all(r["speech_ratio"] == r["duration"] / 10 and "validation_status" not in r for r in kept)
    raw = files[0].read_text().splitlines()
    assert lines[0] == {  # a reject row: where, why, and the record as it came in
        "line": 1,
        "reason": "quality_speech_ratio",
        "detail": "speech_ratio 0.1 < min 0.5",
        "original": raw[0],
    }
    assert (
        json.loads((tmp_path / "drop" / "stats.json").read_text())
        == summary
        == {
            "dataset": "t",
            "action": "drop",
            "filters": filters,
            "records_in": 10,
            "records_out": 5,
            "rejected_total": 5,
            "rejected": {"quality_speech_ratio": 4, "unreadable_audio": 1},
            "marked_fail": 0,
            "failing_by_metric": {"speech_ratio": 4},
            "hours_in": round(55 / 3600, 6),
            "hours_out": round(38 / 3600, 6),
        }
    )
    assert (
        "quality t (drop): 10 records in, 5 kept (0 marked fail), 5 rejected "
        "{'quality_speech_ratio': 4, 'unreadable_audio': 1}" in caplog.text
    )

    summary, kept, rejected = run_quality_filter(tmp_path, *files, "mark", filters)
    assert summary["records_out"] == 9 and summary["rejected"] == {"unreadable_audio": 1}
    assert summary["marked_fail"] == 4 and summary["failing_by_metric"] == {"speech_ratio": 4}
    assert [r["validation_status"] for r in kept] == ["fail"] * 4 + ["pass"] * 5
    assert (
        kept[1]["manifest_speech_ratio"] == 0.99 and kept[1]["speech_ratio"] == 0.2
    )  # never overwritten silently


def test_filter_refuses_metrics_out_of_step_and_unknown_metrics(tmp_path):
    prepared, metrics, stats = _measured(3, tmp_path)
    metrics.write_text("\n".join(metrics.read_text().splitlines()[:2]) + "\n")
    with pytest.raises(
        SharflowError, match=r"does not match .* at line 3: rerun with --forcerun quality_part"
    ):
        run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {})
    with pytest.raises(
        SharflowError, match="unknown metric 'snr'; known: dnsmos_sig, dnsmos_bak, dnsmos_ovrl"
    ):
        run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {"snr": {"min": 1}})
    with pytest.raises(SharflowError, match=r"give \{min: x\}"):
        run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {"speech_ratio": {"low": 1}})
    assert with_metrics({"a": 1}, dict.fromkeys(METRICS)) == {"a": 1, **dict.fromkeys(METRICS)}


def test_filter_refuses_a_count_that_does_not_add_up_an_unknown_action_and_files_out_of_step(tmp_path):
    prepared, metrics, stats = _measured(4, tmp_path)
    stats.write_text(json.dumps({"records_out": 5}))  # prepare says 5, the files hold 4
    with pytest.raises(SharflowError, match=r"^quality t: 5 records in but 4 kept \+ 0 rejected; rerun with"):
        run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {})
    assert not (tmp_path / "drop" / "kept.jsonl").exists()  # nothing renamed into place
    stats.write_text(json.dumps({"records_out": 4}))
    with pytest.raises(
        SharflowError, match=r"^quality.action must be one of \('drop', 'mark'\), got 'keep'$"
    ):
        run_quality_filter(tmp_path, prepared, metrics, stats, "keep", {})
    lines = metrics.read_text().splitlines()
    for bad, line in (([*lines, '{"line": 5}'], 5), ([lines[0], lines[2], lines[1], lines[3]], 2)):
        metrics.write_text("\n".join(bad) + "\n")
        with pytest.raises(
            SharflowError, match=rf"metrics.jsonl does not match .*prepared.jsonl at line {line}:"
        ):
            run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {})


def test_a_record_failing_two_filters_names_both_and_a_filter_on_what_was_not_measured_names_the_file(
    tmp_path,
):
    prepared, metrics, stats = _measured(2, tmp_path)
    filters = {"speech_ratio": {"min": 0.9}, "dnsmos_sig": {"max": 0.5}}
    _, _, rejected = run_quality_filter(tmp_path, prepared, metrics, stats, "drop", filters)
    row = json.loads((rejected / "quality_speech_ratio.jsonl").read_text().splitlines()[0])
    assert row["detail"] == "speech_ratio 0.5 < min 0.9; dnsmos_sig 1.0 > max 0.5"
    with pytest.raises(
        SharflowError,
        match=rf"quality.filters.cer: {metrics} holds no cer; the ASR check .*"
        r"set quality.asr.model \(or random_from_config\), or remove the filter$",
    ):
        run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {"cer": {"max": 0.1}})


def test_kept_records_keep_their_text_as_written(tmp_path):
    prepared, metrics, stats = _measured(2, tmp_path)
    records = [json.loads(x) for x in prepared.read_text().splitlines()]
    records[0]["text"] = "Größe — ça va?"
    prepared.write_text("".join(json.dumps(r) + "\n" for r in records))
    run_quality_filter(tmp_path, prepared, metrics, stats, "drop", {})
    assert "Größe — ça va?" in (tmp_path / "drop" / "kept.jsonl").read_text(
        encoding="utf-8"
    )  # not \u-escaped


def test_filter_costs_are_exact_and_the_kept_curves_read_the_histograms(tmp_path):
    from sharflow.report.quality_costs import quality_view

    prepared, metrics, stats = _measured(10, tmp_path, error_at=7)
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    for m in lines:
        if "error" not in m:  # lines 1..10 -> 4.0, 3.7, ... 1.3; none on an interior edge of 4 bins
            m["dnsmos_ovrl"] = round(4.3 - 0.3 * m["line"], 6)
    lines[2]["loudness_lufs"] = None
    metrics.write_text("".join(json.dumps(m) + "\n" for m in lines))
    filters = {
        "speech_ratio": {"min": 0.5},  # fails lines 1-4: 10 s
        "dnsmos_ovrl": {"min": 2.5},  # line 6 is at the threshold; fails 8, 9, 10: 27 s
        "loudness_lufs": {"max": 2.0},  # only the null on line 3 fails: 3 s
    }
    view = quality_view("t", str(prepared), str(metrics), {"filters": filters, "action": "mark"}, bins=4)
    got = [(r["filter"], r["records"], r["hours"]) for r in view.removed]
    assert got == [
        ("speech_ratio >= 0.5", 4, round(10 / 3600, 6)),
        ("dnsmos_ovrl >= 2.5", 3, round(27 / 3600, 6)),
        ("loudness_lufs <= 2.0", 1, round(3 / 3600, 6)),
        ("all filters together", 7, round(37 / 3600, 6)),
        ("unreadable audio (always rejected)", 1, round(7 / 3600, 6)),
    ]
    summary, _, _ = run_quality_filter(tmp_path, prepared, metrics, stats, "mark", filters)
    assert summary["marked_fail"] == 7  # the filter job agrees on "all together"

    h = view.histograms["dnsmos_ovrl"]
    values = {m["line"]: m["dnsmos_ovrl"] for m in lines if "error" not in m}  # duration = line
    assert np.count_nonzero(h.seconds) >= 3 and h.seconds.sum() == 48  # informative, all measured
    for i, edge in enumerate(h.edges):
        at_least = sum(d for d, v in values.items() if v >= edge) / 3600
        at_most = sum(d for d, v in values.items() if v <= edge) / 3600
        if 0 < i < len(h.edges) - 1:
            assert h.kept_hours("min")[i] == pytest.approx(at_least)
            assert h.kept_hours("max")[i] == pytest.approx(at_most)
    assert h.kept_hours("min")[0] == h.kept_hours("max")[-1] == pytest.approx(48 / 3600)
    assert view.histograms["loudness_lufs"].null_seconds == 3


def test_each_degraded_demo_utterance_fails_its_own_filter_and_the_clean_ones_pass(tmp_path):
    """demo/degraded (demo/make_degraded.py) against the shipped config's filters, real weights."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    dataset, quality = config["datasets"]["degraded"], config["quality"]
    root = REPO / dataset["audio_root"]
    prep = prepare_demo(tmp_path, REPO / dataset["manifest"], root)
    assert json.loads((prep / "stats.json").read_text())["rejected_total"] == 0
    run_quality_part(
        0,
        records=str(prep / "prepared.jsonl"),
        parts=1,
        out_metrics=str(tmp_path / "metrics.jsonl"),
        out_stats=str(tmp_path / "stats.json"),
        settings=MeasureSettings(str(root), quality["dnsmos_max_windows"]),
        device="cpu",
    )
    records = read_jsonl(prep / "prepared.jsonl")
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    expected = {
        "noise_0db": {"dnsmos_bak"},
        "lowpass_4khz": {"bandwidth_hz"},
        "leading_silence": {"leading_silence"},
        "trailing_silence": {"trailing_silence"},
        "clipped": {"clipping_fraction"},
        "wrong_text": {"speaking_rate"},
        "silence_only": {"speech_ratio"},
    }
    seen = set()
    for record, m in zip(records, metrics, strict=True):
        kind = next((k for k in expected if record["audio_filepath"].endswith(f"_{k}.flac")), None)
        failed = {metric for metric, _ in failures(m, quality["filters"])}
        if kind == "silence_only":  # no speech: every speech-based metric is null and fails too
            assert "speech_ratio" in failed, (record["audio_filepath"], m)
        else:
            assert failed == expected.get(kind, set()), (record["audio_filepath"], m)
        seen.add(kind)
    assert seen == {None, *expected}  # clean records and every kind of damage


# ---- parts and ranks ----------------------------------------------------------------------------


def test_parts_are_contiguous_with_equal_seconds(tmp_path):
    """A record goes to part int(parts * (seconds before it) / total seconds)."""
    prepared = tmp_path / "p.jsonl"
    prepared.write_text("".join(json.dumps({"duration": d}) + "\n" for d in (1, 1, 1, 1, 4, 1, 1)))
    assert [[ln for ln, _, _ in part_records(str(prepared), p, 2)] for p in range(2)] == [
        [1, 2, 3, 4, 5],
        [6, 7],
    ]
    assert [[ln for ln, _, _ in part_records(str(prepared), p, 3)] for p in range(3)] == [
        [1, 2, 3, 4],
        [5],
        [6, 7],
    ]
    assert part_of(5.0, 10.0, 2) == 1 and part_of(4.999, 10.0, 2) == 0 and part_of(10.0, 10.0, 2) == 1
    assert part_of(0.0, 0.0, 4) == 0


def test_metrics_are_byte_identical_for_any_parts_ranks_workers_and_batch_seconds(tmp_path):
    """8 demo records measured as 1 part on 1 rank, as 2 parts on 2 ranks each, on 1 rank in groups of
    about 2 s, and by one rank whose records 3 worker processes read (groups of about 5 s)."""
    from sharflow.work.ranks import Rank

    prep = prepare_demo(tmp_path)
    lines = (prep / "prepared.jsonl").read_text().splitlines()
    short = [x for x in lines if json.loads(x)["duration"] < 3.5][:8]
    (prep / "prepared.jsonl").write_text("\n".join(short) + "\n")
    (prep / "stats.json").write_text(json.dumps({"records_out": len(short)}))
    outputs = []
    for parts, workers, seconds in ((1, 1, 300.0), (2, 2, 300.0), (1, 1, 2.0)):
        out = tmp_path / f"p{parts}w{workers}s{seconds}"
        settings = MeasureSettings(str(DEMO / "audio"), dnsmos_max_windows=2, batch_seconds=seconds)
        stats = [
            run_quality_part(
                p,
                records=str(prep / "prepared.jsonl"),
                parts=parts,
                out_metrics=str(out / f"part-{p}.jsonl"),
                out_stats=str(out / f"part-{p}.stats.json"),
                settings=settings,
                device="cpu",
                workers=workers,
            )
            for p in range(parts)
        ]
        assert sum(s["records"] for s in stats) == len(short)
        summary = merge_quality(
            part_metrics=[str(out / f"part-{p}.jsonl") for p in range(parts)],
            part_stats=[str(out / f"part-{p}.stats.json") for p in range(parts)],
            records_stats=str(prep / "stats.json"),
            metrics=str(out / "metrics.jsonl"),
            stats=str(out / "metrics_stats.json"),
        )
        assert summary["records"] == len(short) and summary["unreadable"] == 0
        outputs.append((out / "metrics.jsonl").read_bytes())
    (tmp_path / "pool").mkdir()
    rank = Rank(0, "cpu", str(tmp_path / "pool"))
    items = [(n, offset) for n, offset, _ in part_records(str(prep / "prepared.jsonl"), 0, 1)]
    settings = MeasureSettings(str(DEMO / "audio"), dnsmos_max_windows=2, batch_seconds=5.0)
    digest = measure_digest(settings, "onnxruntime-cpu")
    measured = measure_records(rank, items, str(prep / "prepared.jsonl"), settings, digest, workers=3)
    assert measured["records"] == len(short) and measured["measuring_seconds"] > 0
    rows = [json.loads(x) for x in outputs[0].decode().splitlines()]
    assert [r["line"] for r in rows] == list(range(1, len(short) + 1))
    assert len({r["dnsmos_ovrl"] for r in rows}) == len(rows)  # the values carry information
    assert outputs[0] == outputs[1] == outputs[2] == Path(rank.file(".jsonl")).read_bytes()


def test_a_grown_manifest_is_measured_only_where_it_grew(tmp_path):
    """Measures are kept by what was measured, not by line: records inserted before old ones, one
    removed and one whose span changed; only the new and the changed are measured, and the bytes
    equal a measurement of everything afresh."""
    prep = prepare_demo(tmp_path)
    lines = [x for x in (prep / "prepared.jsonl").read_text().splitlines() if json.loads(x)["duration"] < 3.5]
    first, grown = tmp_path / "first.jsonl", tmp_path / "grown.jsonl"
    first.write_text("\n".join(lines[:4]) + "\n")
    changed = {**json.loads(lines[2]), "duration": 1.0}  # same file, another span
    new = [lines[4], lines[0], json.dumps(changed), lines[3]]  # less lines[1]
    grown.write_text("\n".join(new) + "\n")

    def measure(records, name, previous=None):
        return measure_demo_part(tmp_path, records, name, previous)

    stats, before = measure(first, "before")
    assert (stats["measured"], stats["reused"]) == (4, 0)
    stats, after = measure(grown, "after", previous=str(tmp_path / "before.jsonl"))
    assert (stats["measured"], stats["reused"]) == (2, 2)  # lines[4] and the changed span
    rows = [json.loads(x) for x in after.decode().splitlines()]
    assert [r["line"] for r in rows] == list(range(1, 5))
    assert len({r["dnsmos_ovrl"] for r in rows}) == 4  # the values carry information
    assert rows[1]["dnsmos_ovrl"] == json.loads(before.decode().splitlines()[0])["dnsmos_ovrl"]
    _, fresh = measure(grown, "fresh")
    assert after == fresh


def test_a_measure_key_changes_with_the_file_the_span_the_text_the_settings_and_the_engine(tmp_path):
    audio = tmp_path / "a.wav"
    audio.write_bytes(b"x" * 10)
    record = {"audio_filepath": "a.wav", "offset": 0.0, "duration": 1.0, "text": "a"}
    key = record_key(record, str(audio), "d")
    assert key != record_key({**record, "offset": 0.5}, str(audio), "d")
    assert key != record_key(record, str(audio), "e")
    # the text the speaking rate counts (and the ASR check scores against): normalized_text, else text
    assert key != record_key({**record, "text": "b"}, str(audio), "d")
    spoken = {**record, "normalized_text": "ay"}
    assert record_key(spoken, str(audio), "d") == record_key({**spoken, "text": "b"}, str(audio), "d")
    assert record_key(spoken, str(audio), "d") != record_key(
        {**spoken, "normalized_text": "b"}, str(audio), "d"
    )
    os.utime(audio, ns=(1, 1))
    assert key != record_key(record, str(audio), "d")
    s = MeasureSettings(str(tmp_path))
    digest = measure_digest(s, "onnxruntime-cpu")
    assert digest == measure_digest(
        MeasureSettings("elsewhere", batch_seconds=7), "onnxruntime-cpu"
    )  # not what
    assert digest != measure_digest(MeasureSettings(str(tmp_path), dnsmos_max_windows=3), "onnxruntime-cpu")
    assert digest != measure_digest(s, "torch-cuda")  # the GPU's scores differ in the last decimals


def test_only_keyed_error_free_wanted_lines_are_kept_and_they_take_this_runs_line_and_text_measures(tmp_path):
    previous = tmp_path / "metrics.jsonl"
    rows = [
        {"line": 1, "dnsmos_ovrl": 3.1},  # an older sharflow's line: no key
        {"line": 2, "key": "k2", "dnsmos_ovrl": 3.2, "tokenizer_dropped_chars": 4},
        {"line": 3, "key": "k3", "dnsmos_ovrl": 3.3},  # not wanted
        {"line": 4, "key": "k4", "error": "undecodable"},  # tried again
        {"line": 5, "key": "k5", "dnsmos_ovrl": 3.5},
    ]
    previous.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wanted = ["k2", "k4", "k5", "k9"]
    kept = kept_measures(str(previous), wanted)
    assert kept == {"k2": rows[1], "k5": rows[4]}
    assert kept_measures(None, wanted) == kept_measures(str(tmp_path / "none.jsonl"), wanted) == {}
    assert kept_measures(str(previous), []) == {}
    assert TEXT_METRICS == ("tokenizer_dropped_chars",)
    keyed = [(7, "k5", {"tokenizer_dropped_chars": 0}), (8, "k2", {"tokenizer_dropped_chars": 1})]
    assert list(reused_lines(kept, keyed)) == [
        '{"line": 7, "key": "k5", "dnsmos_ovrl": 3.5}\n',  # no text measure kept: none added
        '{"line": 8, "key": "k2", "dnsmos_ovrl": 3.2, "tokenizer_dropped_chars": 1}\n',
    ]
    assert kept["k2"]["line"] == 2  # the kept lines themselves are not changed
    record = {"audio_filepath": "a.wav", "offset": 0.0, "duration": 1.0, "text": "a"}
    unreadable = record_key(record, str(tmp_path / "gone.wav"), "d")  # measured (and rejected) again
    (tmp_path / "gone.wav").write_bytes(b"x")
    assert len(unreadable) == 20 and unreadable != record_key(record, str(tmp_path / "gone.wav"), "d")


# ---- mark mode into NeMo's dataloader -----------------------------------------------------------


def test_nemo_dataloader_drops_exactly_the_marked_cuts(with_context, tmp_path):
    """Cuts marked `fail` (on cut.custom) and cuts over max_cer (supervision custom) are the ones
    NeMo's get_lhotse_dataloader_from_config leaves out."""
    import torch
    from lhotse import CutSet
    from nemo.collections.common.data.lhotse.dataloader import get_lhotse_dataloader_from_config
    from omegaconf import OmegaConf

    records = [json.loads(x) for x in with_context[0].read_text().splitlines()][:24]
    for i, r in enumerate(records):
        r["validation_status"] = "fail" if i % 3 == 0 else "pass"
        r["cer"] = 0.5 if i % 5 == 1 else 0.01
    marked = tmp_path / "with_context.jsonl"
    marked.write_text("".join(json.dumps(r) + "\n" for r in records))
    write_all(tmp_path / "ds", marked, shard_size=8)
    cuts = list(read_back(tmp_path / "ds"))
    assert {c.custom["validation_status"] for c in cuts} == {"pass", "fail"}
    assert all("validation_status" not in c.supervisions[0].custom for c in cuts)
    expected = {
        c.id
        for c in cuts
        if c.custom["validation_status"] == "pass" and c.supervisions[0].custom["cer"] <= 0.1
    }
    assert 0 < len(expected) < len(cuts)

    class Ids(torch.utils.data.Dataset):
        def __getitem__(self, batch: CutSet):
            return [c.id for c in batch]

    shar = tmp_path / "ds" / "shar"
    config = OmegaConf.create(
        {
            "shar_path": {"cuts": data_files(shar / "cuts")},
            "batch_size": 4,
            "num_workers": 0,
            "seed": 0,
            "shuffle": False,
            "max_cer": 0.1,
            "keep": "pass",
            "force_finite": True,
        }
    )
    loader = get_lhotse_dataloader_from_config(config, global_rank=0, world_size=1, dataset=Ids())
    assert {cid for batch in loader for cid in batch} == expected
