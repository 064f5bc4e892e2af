"""Quality-stage throughput next to its floor measured in the same run, DNSMOS's cost per window,
and a part's peak memory.

1. models: DNSMOS per window, the per-record path before batching (the published pipeline: one
   clip at a time, one onnxruntime run per window, one thread) against the batched engines on the
   same clips (sharflow.models.dnsmos.Dnsmos.score over all of them: onnxruntime, the stage's engine
   on a CPU, and the graph in torch, its engine on a GPU), in CPU-seconds and wall seconds per
   window, with the scores' largest difference; and the VAD, Silero's own frame-by-frame
   audio_forward against the batched SileroVad, audio-seconds per second and the probabilities'
   largest difference.
2. throughput: the demo corpus x --times, prepared. The floor is the models alone on audio already
   decoded and resampled (and on the device): DNSMOS and the VAD (and the ASR check) over the same
   groups of --batch-seconds the stage forms, one process. The stage is
   sharflow.quality.part.run_quality_part (one part) with 1 and 2 workers (CPU), or on every visible
   GPU with --workers CPU workers, then with 2 (--device cuda; the GPU's busy share is sampled with
   nvidia-smi while the first runs). Figures are audio-seconds per wall-clock second (per GPU on a
   GPU); the metrics of every stage run must be byte-identical. With --against-cpu on a GPU, the
   part runs once more on CPU ranks, and the records whose VAD speech spans differ between the
   devices are counted, with the scores' largest differences.
3. memory: peak RSS of one quality part (1 worker, a fresh process) over the demo x1 and x10: a
   part streams its records, so the peak should not grow with the data.

--dnsmos-max-windows (default 1 on a CPU, where every window costs ~0.5 s of a thread; 0, every
window, is the published pipeline) applies to the floor and the stage alike. --asr MODEL adds the ASR
check (a NeMo ASR .nemo or pretrained name; `random` builds the tiny random CTC model of
config/models/tiny_asr.yaml). --one-pass measures the whole one pass over the audio (issue 62): also
the context embedder and, as with splits, the identity part's fingerprints and level-normalised
voices, each GE2E variant in the floor too; every run's embedding rows and identity files must then
be the same bytes as well. --by-model: each of the floor's models alone, where a rank's time goes.

Usage: python benchmarks/bench_quality.py [--times 3] [--rss-times 1 10] [--device cpu|cuda]
                                          [--dnsmos-max-windows N] [--workers 8] [--asr MODEL]
                                          [--batch-seconds 300] [--skip-memory] [--skip-models]
                                          [--against-cpu] [--one-pass] [--by-model]
"""

import argparse
import contextlib
import multiprocessing
import subprocess
import tempfile
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

from _corpus import prepare, proc_status_mb, repeated_demo


def prepared_corpus(tmp: Path, times: int) -> tuple[str, str, list[dict]]:
    """(prepared.jsonl, audio root, records) of the demo x times (audio folders linked, not copied)."""
    manifest, root = repeated_demo(tmp, times, link=True)
    files, records = prepare(tmp / "ds", manifest, root)
    return files.prepared, str(root), records


def decoded(records: list[dict], root: str, asr_rate: int | None) -> list[tuple]:
    """(audio at 16 kHz, audio at the ASR model's rate or None) of every record, decoded beforehand."""
    from sharflow.io.audio import load_span, resample, resolve_audio_path

    out = []
    for r in records:
        audio, rate = load_span(resolve_audio_path(root, r["audio_filepath"])[0], r["offset"], r["duration"])
        out.append((resample(audio, rate, 16000), resample(audio, rate, asr_rate) if asr_rate else None))
    return out


class GpuBusy:
    """The mean of nvidia-smi's utilization.gpu samples (every 100 ms) while the block runs."""

    def __init__(self, device: str):
        self.enabled, self.samples = device == "cuda", []

    def __enter__(self):
        if self.enabled:
            try:
                self.proc = subprocess.Popen(
                    [
                        "nvidia-smi",
                        "--query-gpu=utilization.gpu",
                        "--format=csv,noheader,nounits",
                        "-lms",
                        "100",
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            except FileNotFoundError:
                self.enabled = False
                return self
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            first = line.split(",")[0].strip()
            if first.isdigit():
                self.samples.append(int(first))

    def __exit__(self, *exc):
        if self.enabled:
            self.proc.terminate()
            self.proc.wait()
            self.reader.join(timeout=5)

    @property
    def share(self) -> str:
        return f"{sum(self.samples) / len(self.samples):.0f} %" if self.samples else "n/a"


def _timed(run, device: str):
    """(CPU seconds, wall seconds, result) of run()."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = run()
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def bench_models(records: list[dict], root: str, device: str, clips: int = 12) -> None:
    """1. DNSMOS per window and the VAD per audio second: the per-record paths before batching against
    the batched ones, on the same clips; the largest difference of their outputs."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from sharflow.models.dnsmos import Dnsmos, mos, tile, weights_path
    from sharflow.models.vad import SileroVad

    torch.set_num_threads(1)
    audio = [a for a, _ in decoded(records[:clips], root, None)]
    tiled = [tile(a) for a in audio]
    windows = sum(t.count for t in tiled)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    session = ort.InferenceSession(weights_path(), opts, providers=["CPUExecutionProvider"])

    def per_record():
        return [
            mos(
                np.concatenate([session.run(None, {"input_1": t.window(i)[None]})[0] for i in range(t.count)])
            )
            for t in tiled
        ]

    def eight_a_run():  # onnxruntime taking windows 8 at a time: the batching the CPU engine declines
        windows = np.stack([t.window(i) for t in tiled for i in range(t.count)])
        raw = np.concatenate(
            [session.run(None, {"input_1": windows[i : i + 8]})[0] for i in range(0, len(windows), 8)]
        )
        ends = np.cumsum([t.count for t in tiled])
        return [mos(raw[end - t.count : end]) for t, end in zip(tiled, ends, strict=True)]

    rank = "cuda:0" if device == "cuda" else "cpu"
    paths = {"before: per record, onnxruntime, one window per run, 1 thread": per_record}
    if device == "cpu":
        paths["onnxruntime, 8 windows per run, 1 thread"] = eight_a_run
    # the stage's engine on this device; on a CPU also the GPU's (torch), in batches of 4 windows
    engines = [Dnsmos(rank)] + ([Dnsmos(rank, runtime="torch", batch=4)] if device == "cpu" else [])
    for engine in engines:
        engine.score(audio[:1])  # warm-up (cuDNN's algorithm choice, lazy loading)
        paths[f"batched: Dnsmos.score over all clips ({engine.engine})"] = partial(engine.score, audio)
    costs = {name: [] for name in paths}
    for _ in range(3):  # alternating, the best of three each: the machine's noise is not the path's
        for name, run in paths.items():
            costs[name].append(_timed(run, device))
    best = {name: min(runs, key=lambda c: c[1]) for name, runs in costs.items()}
    before = best[next(iter(paths))]
    print(f"\n1. DNSMOS per window: {clips} demo clips, every window ({windows} windows), device {device}")
    print(f"{'path':<66}{'CPU s/window':>13}{'wall s/window':>14}{'max diff':>10}")
    for name, (c, w, scores) in best.items():
        worst = max(abs(a[k] - b[k]) for a, b in zip(before[2], scores, strict=True) for k in a)
        print(f"{name:<66}{c / windows:>13.4f}{w / windows:>14.4f}{worst:>10.1e}")
    engine_name = next(n for n in paths if "onnxruntime-cpu" in n or "torch-cuda" in n)
    print(
        f"the stage's engine / before, CPU s per window: {best[engine_name][0] / before[0]:.3f} "
        "(bar <= 1 on a CPU); score differences: bar <= 0.005"
    )

    from silero_vad import load_silero_vad

    seconds = sum(len(a) for a in audio) / 16000
    own, vad = load_silero_vad().to(rank), SileroVad(rank)
    vad.probabilities(audio[:1])

    def frame_by_frame():
        with torch.inference_mode():
            return [own.audio_forward(torch.from_numpy(a)[None].to(rank), 16000)[0].numpy() for a in audio]

    runs = {
        "Silero's audio_forward, clip by clip": frame_by_frame,
        "batched (SileroVad)": partial(vad.probabilities, audio),
    }
    timed = {
        name: min((_timed(run, device) for _ in range(2)), key=lambda c: c[1]) for name, run in runs.items()
    }
    (_, first_wall, first), (_, batched_wall, second) = timed.values()
    worst = max(float(np.abs(a - b).max()) for a, b in zip(first, second, strict=True))
    print(f"   VAD over the same {seconds:.0f} s of audio: ", end="")
    print(
        f"audio_forward {seconds / first_wall:.0f} audio-s/s, batched {seconds / batched_wall:.0f} "
        f"audio-s/s ({first_wall / batched_wall:.1f}x), probabilities within {worst:.1e}"
    )


def floor(clips: list[tuple], durations: list[float], device: str, settings, by_model: bool = False):
    """(seconds of the models alone over the stage's groups of batch_seconds, one process; with
    by_model, {model: seconds} of each alone over the same groups, one after another)."""
    import torch

    from sharflow.models.speaker_embedders import embed_each
    from sharflow.quality.rank import Meters

    torch.set_num_threads(1)
    meters = Meters(device, settings)
    groups = grouped(clips, durations, settings.batch_seconds)
    meters.dnsmos.score([groups[0][0][0]])  # warm-up
    t = time.perf_counter()
    for group in groups:
        meters.scores_and_spans([a for a, _ in group])  # as the stage runs them (side by side on a GPU)
        if meters.transcriber:
            meters.transcriber.transcribe_sorted([w for _, w in group], meters.asr_batch_seconds)
        for embedder in (meters.embedder, meters.voices):  # --one-pass: a group's records in one call
            if embedder:
                embed_each(embedder, [clip for clip, _ in group])
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t, (each_model(meters, groups, device) if by_model else {})


def grouped(clips: list[tuple], durations: list[float], batch_seconds: float) -> list[list[tuple]]:
    """The clips in the stage's groups: consecutive, each closed once it holds batch_seconds."""
    groups, group, seconds = [], [], 0.0
    for clip, duration in zip(clips, durations, strict=True):
        group.append(clip)
        seconds += duration
        if seconds >= batch_seconds:
            groups.append(group)
            group, seconds = [], 0.0
    return groups + ([group] if group else [])


def each_model(meters, groups: list[list[tuple]], device: str) -> dict[str, float]:
    """--by-model: seconds of each of the floor's models alone over its groups, one model after another
    (a second pass; on a GPU each model's kernels waited for): where a rank's time goes."""
    import torch

    from sharflow.models.speaker_embedders import embed_each

    models = {"DNSMOS": meters.dnsmos.score, "VAD": meters.vad.speech}
    for kind, model in (("context", meters.embedder), ("voices", meters.voices)):
        models |= {f"GE2E ({kind})": partial(embed_each, model)} if model else {}
    seconds = {}
    for name, run in models.items():
        run([groups[0][0][0]])  # warm-up
        t = time.perf_counter()
        for group in groups:
            run([a for a, _ in group])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - t
    return seconds


def cpu_side(prepared: str, settings) -> float:
    """Seconds of the CPU side alone (read, decode, resample, signal measures) over every record, one
    process: what a rank's CPU workers do beside its device."""
    from sharflow.quality.rank import load_record
    from sharflow.work.parts import part_records

    load = partial(load_record, prepared, settings, "digest", None)
    items = [(line, offset) for line, offset, _ in part_records(prepared, 0, 1)]
    load(items[0])  # imports (scipy, pyloudnorm) outside the measurement: a worker pays them once
    t = time.perf_counter()
    for item in items:
        load(item)
    return time.perf_counter() - t


def stage(prepared: str, out: Path, device: str, workers: int, settings) -> tuple[float, bytes, dict, bytes]:
    """(seconds, metrics bytes, stats, the rest's bytes) of one quality part over the whole prepared
    file: the rest, with --one-pass, its embedding rows and its identity part's files."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.quality.part import run_quality_part

    metrics, embeddings = out / "metrics.jsonl", out / "embeddings.npy"
    identity = DatasetFiles(str(out)).identity_part(0) if settings.identity else None
    t = time.perf_counter()
    stats = run_quality_part(
        0,
        records=prepared,
        parts=1,
        out_metrics=str(metrics),
        out_stats=str(out / "stats.json"),
        settings=settings,
        device=device,
        workers=workers,
        out_identity=identity,
        out_embeddings=str(embeddings) if settings.embedder else None,
    )
    seconds = time.perf_counter() - t
    rest = ([embeddings] if settings.embedder else []) + (
        [Path(identity.records), Path(identity.hashes), Path(identity.voices)] if identity else []
    )
    return seconds, metrics.read_bytes(), stats, b"".join(f.read_bytes() for f in rest)


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


def bench_throughput(args) -> None:
    from sharflow.quality.part import MeasureSettings

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepared, root, records = prepared_corpus(tmp, args.times)
        if not args.skip_models:  # part 1: a fixed ~40 s of the per-record onnxruntime path
            bench_models(records, root, args.device)
        asr = asr_options(args.asr, args.asr_batch_seconds, tmp)
        settings = MeasureSettings(root, args.dnsmos_max_windows, asr, args.batch_seconds)
        if args.one_pass:  # the context embedder and the identity part (voices) from the same decode
            from sharflow.identity.part import IdentityOptions, VoiceEmbedding
            from sharflow.quality.part import SpeakerEmbedding

            voices = IdentityOptions("demo", False, VoiceEmbedding("ge2e"))
            settings = replace(settings, identity=voices, embedder=SpeakerEmbedding("ge2e"))
        n, audio = len(records), sum(r["duration"] for r in records)
        floor_device = "cuda:0" if args.device == "cuda" else "cpu"
        asr_rate = 16000 if asr else None
        clips, durations = decoded(records, root, asr_rate), [r["duration"] for r in records]
        floor_s, models = floor(clips, durations, floor_device, settings, args.by_model)
        cpu_s = cpu_side(prepared, settings)
        # on a GPU a second run with 2 CPU workers: its metrics must be the same bytes
        runs = (
            [("cpu", 1), ("cpu", 2)]
            if args.device == "cpu"
            else [(args.device, args.workers), (args.device, 2)]
        )
        results, busy = {}, GpuBusy(args.device)
        for dev, workers in runs:
            out = tmp / f"{dev}-{workers}"
            out.mkdir()
            with busy if (dev, workers) == runs[0] else contextlib.nullcontext():  # the first run's share
                results[(dev, workers)] = stage(prepared, out, dev, workers, settings)
        if args.against_cpu and args.device == "cuda":  # the same part on CPU ranks, every core
            (tmp / "cpu-all").mkdir()
            cpu_run = stage(prepared, tmp / "cpu-all", "cpu", 0, settings)
            (tmp / "small-groups").mkdir()  # and on the GPU in groups a fifth the size
            small = replace(settings, batch_seconds=settings.batch_seconds / 5)
            regrouped = stage(prepared, tmp / "small-groups", args.device, args.workers, small)
    gpus = len({r["device"] for r in results[runs[0]][2]["ranks"]}) if args.device == "cuda" else 1
    with_asr = f", ASR {args.asr} in batches of {args.asr_batch_seconds:g} s" if asr else ""
    with_asr += ", the one pass (context embedder, identity voices and fingerprints)" if args.one_pass else ""
    print(
        f"\n2. quality stage on the demo corpus x{args.times}: {n} utterances, {audio:.0f} s of audio, "
        f"device {args.device}, dnsmos_max_windows {args.dnsmos_max_windows}, groups of "
        f"{args.batch_seconds:g} s{with_asr}"
    )
    per = " per GPU" if args.device == "cuda" else ""
    print(f"{'run':<62}{'seconds':>9}{'utt/s':>8}{f'audio s/s{per}':>18}")
    rows = [(f"floor: the models alone on decoded audio, 1 process ({floor_device})", floor_s, 1)]
    rows += [(f"stage (one part), {dev}, {w} worker(s)", results[(dev, w)][0], gpus) for dev, w in runs]
    for name, s, count in rows:
        print(f"{name:<62}{s:>9.2f}{n / s:>8.2f}{audio / s / count:>18.2f}")
    if models:
        alone = ", ".join(f"{name} {s:.2f} s ({audio / s:.0f} audio-s/s)" for name, s in models.items())
        print(f"the floor's models alone, one after another: {alone}")
    first_s, _, first_stats, _ = results[runs[0]]
    line = f"stage / floor speed (per GPU): {floor_s / (first_s * gpus):.3f} (bar >= 0.9)"
    if ("cpu", 2) in results:
        line += f";  2 workers / 1 worker: {first_s / results[('cpu', 2)][0]:.2f}x (bar >= 1.7)"
    if args.device == "cuda":
        line += f";  GPU busy {busy.share} (bar >= 70 %)"
    identical = all(r[1] == results[runs[0]][1] and r[3] == results[runs[0]][3] for r in results.values())
    print(line + f";  outputs identical across runs: {identical}")
    print(
        f"CPU side alone (read, decode, resample, signal measures), 1 process: {audio / cpu_s:.0f} "
        f"audio-s/s ({1000 * cpu_s / audio:.2f} ms per audio second): models that measure X audio-s/s "
        f"are kept fed by X / {audio / cpu_s:.0f} CPU workers"
    )
    if args.against_cpu and args.device == "cuda":
        print(device_agreement(results[runs[0]][1], cpu_run[1], cpu_run[0]))
        same = regrouped[1] == results[runs[0]][1]
        print(
            f"GPU in groups of {args.batch_seconds / 5:g} s against {args.batch_seconds:g} s: "
            f"metrics identical: {same}"
        )
    for r in first_stats["ranks"]:
        print(
            f"  rank {r['rank']} ({r['device']}, DNSMOS {r['dnsmos_engine']}): {r['seconds']:.1f} s, "
            f"of which {r['measuring_seconds']:.1f} s measuring groups and {r['waiting_seconds']:.1f} s "
            "waiting on its CPU workers"
        )


# the metrics that come from the VAD's speech spans: equal on every device, or the spans differ
SPAN_METRICS = ("speech_ratio", "leading_silence", "trailing_silence", "speaking_rate")


def device_agreement(gpu: bytes, cpu: bytes, cpu_seconds: float) -> str:
    """How the GPU run's metrics stand against the CPU ranks' over the same records: the records whose
    speech spans differ (any SPAN_METRICS value), every other metric's largest difference."""
    import json

    rows = [[json.loads(line) for line in b.decode().splitlines()] for b in (gpu, cpu)]
    assert [r["line"] for r in rows[0]] == [r["line"] for r in rows[1]]
    pairs = list(zip(*rows, strict=True))
    spans = sum(any(g.get(m) != c.get(m) for m in SPAN_METRICS) for g, c in pairs)
    names = [k for k, v in rows[0][0].items() if isinstance(v, float)]
    worst = {k: max(abs((g.get(k) or 0.0) - (c.get(k) or 0.0)) for g, c in pairs) for k in names}
    differ = {m: sum(g.get(m) != c.get(m) for g, c in pairs) for m in SPAN_METRICS}
    return (
        f"GPU against CPU ranks (every core, {cpu_seconds:.1f} s): {len(rows[0])} records, "
        f"{spans} whose speech spans differ (records per metric: "
        + ", ".join(f"{m} {n}" for m, n in differ.items())
        + "); largest differences: "
        + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
    )


def _rss_job(times: int, max_windows: int, queue) -> None:
    from sharflow.quality.part import MeasureSettings

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepared, root, records = prepared_corpus(tmp, times)
        audio = sum(r["duration"] for r in records)
        Path("/proc/self/clear_refs").write_text("5")  # peak mark (VmHWM) from here on
        seconds, _, _ = stage(prepared, tmp, "cpu", 1, MeasureSettings(root, max_windows))
        queue.put((len(records), audio, seconds, proc_status_mb("VmHWM")))


def bench_memory(sizes: list[int], max_windows: int) -> None:
    print("\n3. peak RSS of one quality part, 1 CPU worker, each size in a fresh process")
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
    parser.add_argument("--dnsmos-max-windows", type=int, default=None, help="default: 1 on cpu, 0 on cuda")
    parser.add_argument("--workers", type=int, default=0, help="a GPU stage's threads (0: every core)")
    parser.add_argument("--batch-seconds", type=float, default=300.0)
    parser.add_argument(
        "--asr", default=None, help="NeMo ASR .nemo or name, or `random` (the tiny random model)"
    )
    parser.add_argument("--asr-batch-seconds", type=float, default=60.0)
    parser.add_argument(
        "--one-pass",
        action="store_true",
        help="the whole one pass: also the context embedder and the identity part's fingerprints and voices",
    )
    parser.add_argument("--by-model", action="store_true", help="also each of the floor's models alone")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-models", action="store_true", help="skip part 1 (throughput only)")
    parser.add_argument(
        "--against-cpu",
        action="store_true",
        help="on cuda: also run the part on CPU ranks and compare the speech spans and scores",
    )
    args = parser.parse_args()
    if args.dnsmos_max_windows is None:
        args.dnsmos_max_windows = 1 if args.device == "cpu" else 0
    bench_throughput(args)
    if not args.skip_memory:
        bench_memory(args.rss_times, args.dnsmos_max_windows)


if __name__ == "__main__":
    main()
