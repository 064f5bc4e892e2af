"""Quality-stage throughput next to its floor measured in the same run, and a part's peak memory.

1. throughput: the demo corpus x --times, prepared; the floor is decoding each record's span,
   resampling it to 16 kHz and running DNSMOS and the Silero VAD forward pass over it, in one
   process with one thread, nothing else. The stage is sharflow.quality.part.run_quality_part (one part)
   with 1 and 2 workers (CPU), or on every visible GPU (--device cuda). Figures are audio-seconds
   per wall-clock second; the metrics files of every run must be byte-identical.
2. memory: peak RSS of one quality part (1 worker, a fresh process) over the demo x1 and x10: a
   part streams its records, so the peak should not grow with the data.

--dnsmos-max-windows (default 1) is the stage's `quality.dnsmos_max_windows`: 0 scores every
window of the published pipeline (a short clip tiled to 16 s: ~7 windows of ~0.5 s each on one CPU
thread), which makes a CPU run ~5x slower; both the floor and the stage use the same value.
--asr MODEL adds the ASR check (a NeMo ASR .nemo or pretrained name; `random` builds the tiny random
CTC model of config/models/tiny_asr.yaml) to the stage and its transcription, in batches of
--asr-batch-seconds, to the floor.

Usage: python benchmarks/bench_quality.py [--times 3] [--rss-times 1 10] [--device cpu]
                                          [--dnsmos-max-windows 1] [--asr MODEL]
"""

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

from _corpus import prepare, proc_status_mb, repeated_demo


def prepared_corpus(tmp: Path, times: int) -> tuple[str, str, list[dict]]:
    """(prepared.jsonl, audio root, records) of the demo x times (audio folders linked, not copied)."""
    manifest, root = repeated_demo(tmp, times, link=True)
    files, records = prepare(tmp / "ds", manifest, root)
    return files.prepared, str(root), records


def floor(records: list[dict], root: str, device: str, max_windows: int, asr=None) -> float:
    """Seconds to decode, resample, score with DNSMOS and run the VAD forward pass (and transcribe in
    batches of asr.batch_seconds), one process."""
    import torch

    from sharflow.core.audio import load_span, resample, resolve_audio_path
    from sharflow.quality.metrics import MODEL_RATE, Meters

    torch.set_num_threads(1)
    meters = Meters.load(device, max_windows)
    transcriber = None
    if asr:
        from sharflow.models.asr import Transcriber

        transcriber = Transcriber(asr.model, device)
    batch, batch_seconds = [], 0.0
    t = time.perf_counter()
    for r in records:
        path, _ = resolve_audio_path(root, r["audio_filepath"])
        audio, rate = load_span(path, r["offset"], r["duration"])
        audio_16k = resample(audio, rate, MODEL_RATE)
        meters.dnsmos(audio_16k)
        with torch.inference_mode():
            meters.vad.model.audio_forward(torch.from_numpy(audio_16k)[None], MODEL_RATE)
        if transcriber:
            batch.append(audio_16k)
            batch_seconds += r["duration"]
            if batch_seconds >= asr.batch_seconds:
                transcriber.transcribe(batch)
                batch, batch_seconds = [], 0.0
    if transcriber:
        transcriber.transcribe(batch)
    return time.perf_counter() - t


def stage(
    prepared: str, root: str, out: Path, device: str, workers: int, max_windows: int, asr=None
) -> tuple[float, bytes]:
    """(seconds, metrics bytes) of one quality part over the whole prepared file."""
    from sharflow.quality.part import MeasureSettings, run_quality_part

    metrics = out / "metrics.jsonl"
    t = time.perf_counter()
    run_quality_part(
        0,
        records=prepared,
        parts=1,
        out_metrics=str(metrics),
        out_stats=str(out / "stats.json"),
        settings=MeasureSettings(root, max_windows, asr),
        device=device,
        workers=workers,
    )
    return time.perf_counter() - t, metrics.read_bytes()


def asr_options(model: str | None, batch_seconds: float, tmp: Path):
    """sharflow.quality.part.AsrOptions for --asr (None without it; `random`: the tiny random model)."""
    if model is None:
        return None
    from sharflow.quality.part import AsrOptions

    if model == "random":
        from sharflow.models.asr import build_random_asr

        config = Path(__file__).resolve().parents[1] / "config" / "models" / "tiny_asr.yaml"
        return AsrOptions(str(build_random_asr(config, tmp / "asr.nemo")), batch_seconds, random=True)
    return AsrOptions(model, batch_seconds)


def bench_throughput(times: int, device: str, max_windows: int, asr_model: str | None, batch: float) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepared, root, records = prepared_corpus(tmp, times)
        asr = asr_options(asr_model, batch, tmp)
        n, audio = len(records), sum(r["duration"] for r in records)
        floor_device = "cuda:0" if device == "cuda" else "cpu"
        floor_s = floor(records, root, floor_device, max_windows, asr)
        runs = [("cpu", 1), ("cpu", 2)] if device == "cpu" else [(device, 1)]
        results = {}
        for dev, workers in runs:
            out = tmp / f"{dev}-{workers}"
            out.mkdir()
            results[(dev, workers)] = stage(prepared, root, out, dev, workers, max_windows, asr)
    with_asr = f", ASR {asr_model} in batches of {batch:g} s" if asr else ""
    print(
        f"\n1. quality stage on the demo corpus x{times}: {n} utterances, {audio:.0f} s of audio, "
        f"device {device}, dnsmos_max_windows {max_windows}{with_asr}"
    )
    print(f"{'run':<58}{'seconds':>9}{'utt/s':>8}{'audio s/s':>11}")
    rows = [
        (f"floor: decode+resample+DNSMOS+VAD{'+ASR' if asr else ''}, 1 process ({floor_device})", floor_s)
    ]
    rows += [(f"stage (one part), {dev}, {w} worker(s)", results[(dev, w)][0]) for dev, w in runs]
    for name, s in rows:
        print(f"{name:<58}{s:>9.2f}{n / s:>8.2f}{audio / s:>11.2f}")
    first = results[runs[0]]
    line = f"stage / floor speed: {floor_s / first[0]:.2f} (bar >= 0.85)"
    if ("cpu", 2) in results:
        line += f";  2 workers / 1 worker: {first[0] / results[('cpu', 2)][0]:.2f}x (bar >= 1.7)"
    identical = all(r[1] == first[1] for r in results.values())
    print(line + f";  metrics identical across runs: {identical}")


def _rss_job(times: int, max_windows: int, queue) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepared, root, records = prepared_corpus(tmp, times)
        audio = sum(r["duration"] for r in records)
        Path("/proc/self/clear_refs").write_text("5")  # peak mark (VmHWM) from here on
        seconds, _ = stage(prepared, root, tmp, "cpu", 1, max_windows)
        queue.put((len(records), audio, seconds, proc_status_mb("VmHWM")))


def bench_memory(sizes: list[int], max_windows: int) -> None:
    print("\n2. peak RSS of one quality part, 1 CPU worker, each size in a fresh process")
    print(f"{'copies':>7}{'utterances':>12}{'audio s':>9}{'seconds':>9}{'peak MB':>9}")
    peaks = []
    ctx = multiprocessing.get_context("spawn")
    for times in sizes:
        queue = ctx.Queue()
        p = ctx.Process(target=_rss_job, args=(times, max_windows, queue))
        p.start()
        n, audio, seconds, peak = queue.get()
        p.join()
        peaks.append(peak)
        print(f"{times:>7}{n:>12}{audio:>9.0f}{seconds:>9.1f}{peak:>9.0f}")
    print(f"peak RSS x{sizes[-1]} / x{sizes[0]}: {peaks[-1] / peaks[0]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=3, help="copies of the demo for the throughput runs")
    parser.add_argument("--rss-times", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dnsmos-max-windows", type=int, default=1)
    parser.add_argument(
        "--asr", default=None, help="NeMo ASR .nemo or name, or `random` (the tiny random model)"
    )
    parser.add_argument("--asr-batch-seconds", type=float, default=60.0)
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    bench_throughput(args.times, args.device, args.dnsmos_max_windows, args.asr, args.asr_batch_seconds)
    if not args.skip_memory:
        bench_memory(args.rss_times, args.dnsmos_max_windows)


if __name__ == "__main__":
    main()
