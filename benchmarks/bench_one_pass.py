"""The one pass over the audio against the three passes it replaces, and against its floor, in CPU-s.

The demo corpus x --times, prepared (the records every pass reads), each stage on one CPU thread in
this process (CPU ranks: one torch thread; --workers 1: no reading processes), so that CPU-seconds
are this process's:

1. three passes, as sharflow ran them before the one pass (and runs them with quality off): a
   quality part that measures (DNSMOS, VAD, signal), an identity part that decodes again,
   fingerprints and embeds the level-normalised voice, and the context stage (plan, part, merge)
   whose part decodes again and embeds with the context embedder; the quality merge.
2. the one pass: a quality part that also writes the identity part and the context embedder's rows
   from its one decode, the quality merge (metrics and embedding rows), and the context stage
   reading those rows.
3. the floor: the one pass's own work with nothing around it, on the same records in one loop:
   decode the span and resample it once, the signal measures, the fingerprint and the samples'
   digest, DNSMOS, the VAD and each GE2E variant over the same groups of --batch-seconds the stage
   forms.

It prints CPU-s per record of each, how many times each record was decoded (counted at
sharflow.io.audio.load_span's callers), the floor's CPU-s by part (and so the most the one pass
can save: the two decodes and resamples a record the three passes repeat), the one pass / three
passes ratio (the bar: <= 0.8) and floor / one pass (the bar: >= 0.9), and checks that the one
pass's identity files, metrics (but for their key, which also holds the context embedder) and
context records are the bytes the three passes wrote (the context records: the same bytes since
a GE2E embedding's bytes depend on the record alone, however many records share a call).

Usage: python benchmarks/bench_one_pass.py [--times 2] [--dnsmos-max-windows 1] [--batch-seconds 300]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from _corpus import context_stage, prepare, repeated_demo


class Decodes:
    """Counts load_span calls made through each stage module's own name for it."""

    MODULES = ("sharflow.quality.rank", "sharflow.identity.part", "sharflow.context.part")

    def __init__(self):
        import importlib

        self.count = 0
        for name in self.MODULES:
            module = importlib.import_module(name)
            real = module.load_span

            def counted(*args, _real=real, **kw):
                self.count += 1
                return _real(*args, **kw)

            module.load_span = counted


def cpu_s(fn) -> tuple[float, float]:
    """(CPU-s, wall-s) of fn() in this process."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


def context(files, root: str, out: Path, measured=None) -> None:
    """The context stage (plan, one part on one CPU rank, merge) over the prepared records into `out`."""
    from sharflow.core.layout import DatasetFiles

    context_stage(files, audio_root=Path(root), workers=1, out=DatasetFiles(str(out)), measured=measured)


def quality(files, records: str, out: Path, settings, identity: bool) -> None:
    """One quality part (one CPU rank) and the merge into `out`; with `identity`, its identity part
    and embedding rows too."""
    from sharflow.core.layout import DatasetFiles
    from sharflow.quality.merge import merge_quality
    from sharflow.quality.part import run_quality_part

    q = DatasetFiles(str(out)).quality_part(0)
    ident = DatasetFiles(str(out)).identity_part(0)
    run_quality_part(
        0,
        records=records,
        parts=1,
        out_metrics=q.metrics,
        out_stats=q.stats,
        settings=settings,
        device="cpu",
        workers=1,
        out_identity=ident if identity else None,
        out_embeddings=q.embeddings if identity else None,
    )
    merge_quality(
        part_metrics=[q.metrics],
        part_stats=[q.stats],
        records_stats=files.prepare_stats,
        metrics=str(out / "metrics.jsonl"),
        stats=str(out / "metrics_stats.json"),
        part_embeddings=[q.embeddings] if identity else None,
        embeddings=str(out / "embeddings.npy") if identity else None,
    )


def three_passes(files, root: str, out: Path, dnsmos_windows: int, batch_seconds: float) -> None:
    from sharflow.core.layout import DatasetFiles
    from sharflow.identity.part import VoiceEmbedding, run_identity_part
    from sharflow.quality.part import MeasureSettings

    settings = MeasureSettings(root, dnsmos_windows, batch_seconds=batch_seconds)
    quality(files, files.prepared, out, settings, identity=False)
    ident = DatasetFiles(str(out)).identity_part(0)
    run_identity_part(
        0,
        records=files.prepared,
        parts=1,
        audio_root=root,
        out_records=ident.records,
        out_hashes=ident.hashes,
        out_stats=ident.stats,
        out_voices=ident.voices,
        dataset="demo",
        voices=VoiceEmbedding("ge2e"),
    )
    context(files, root, out)


def one_pass(files, root: str, out: Path, dnsmos_windows: int, batch_seconds: float) -> None:
    from sharflow.context.part import MeasuredEmbeddings
    from sharflow.identity.part import IdentityOptions, VoiceEmbedding
    from sharflow.quality.part import MeasureSettings, SpeakerEmbedding

    settings = MeasureSettings(
        root,
        dnsmos_windows,
        batch_seconds=batch_seconds,
        identity=IdentityOptions("demo", False, VoiceEmbedding("ge2e")),
        embedder=SpeakerEmbedding("ge2e"),
    )
    quality(files, files.prepared, out, settings, identity=True)
    measured = MeasuredEmbeddings(files.prepared, str(out / "embeddings.npy"))
    context(files, root, out, measured)


def floor(records: list[dict], root: str, dnsmos_windows: int, batch_seconds: float) -> dict[str, float]:
    """CPU-s of the one pass's work alone (the module's 3.), by part, its models loaded before the
    clock: {part: CPU-s}."""
    from collections import defaultdict

    from sharflow.identity.part import fingerprint_rows, samples_digest
    from sharflow.io.audio import load_span, resample, resolve_audio_path
    from sharflow.models.dnsmos import Dnsmos
    from sharflow.models.speaker_embedders import load_embedder
    from sharflow.models.vad import SileroVad
    from sharflow.quality.metrics import MODEL_RATE, signal_measures

    dnsmos, vad = Dnsmos("cpu", dnsmos_windows), SileroVad("cpu")
    context_embedder, voices = load_embedder("ge2e", "cpu"), load_embedder("ge2e", "cpu", level="normalize")
    spent: defaultdict[str, float] = defaultdict(float)

    def timed(part: str, fn, *args):
        start = time.process_time()
        out = fn(*args)
        spent[part] += time.process_time() - start
        return out

    group, seconds = [], 0.0
    for r in records:
        path = resolve_audio_path(root, r["audio_filepath"])[0]
        audio, rate = timed("decode", load_span, path, r["offset"], r["duration"])
        wave = timed("resample to 16 kHz", resample, audio, rate, MODEL_RATE)
        timed("signal measures", signal_measures, audio, rate)
        timed("fingerprint + digest", lambda a=audio, r=rate: (fingerprint_rows(a, r), samples_digest(a)))
        group.append(wave)
        seconds += len(wave) / MODEL_RATE
        if seconds >= batch_seconds or r is records[-1]:
            timed("DNSMOS", dnsmos.score, group)
            timed("VAD", vad.speech, group)
            timed("GE2E, context", context_embedder.embed, group)  # a group's records in one call
            timed("GE2E, voices", voices.embed, group)
            group, seconds = [], 0.0
    return dict(spent)


def same_bytes(a: Path, b: Path) -> dict[str, bool]:
    from sharflow.core.layout import DatasetFiles

    pa, pb = DatasetFiles(str(a)), DatasetFiles(str(b))
    files = {
        "identity entries": (pa.identity_part(0).records, pb.identity_part(0).records),
        "fingerprints": (pa.identity_part(0).hashes, pb.identity_part(0).hashes),
        "voices": (pa.identity_part(0).voices, pb.identity_part(0).voices),
        "context records": (pa.with_context, pb.with_context),
    }
    out = {}
    for name, (x, y) in files.items():
        x, y = (Path(x) if Path(x).is_absolute() else a / x), (Path(y) if Path(y).is_absolute() else b / y)
        out[name] = x.read_bytes() == y.read_bytes()
    # a metrics line's key differs: the one pass's also holds the context embedder it measured with
    unkeyed = [
        [{k: v for k, v in json.loads(line).items() if k != "key"} for line in (p / "metrics.jsonl").open()]
        for p in (a, b)
    ]
    out["metrics"] = unkeyed[0] == unkeyed[1]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--times", type=int, default=2)
    parser.add_argument("--dnsmos-max-windows", type=int, default=1)
    parser.add_argument("--batch-seconds", type=float, default=300.0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        manifest, root = repeated_demo(tmp, args.times, link=True)
        files, records = prepare(tmp / "ds", manifest, root)
        n, audio = len(records), sum(r["duration"] for r in records)
        print(f"corpus: the demo x {args.times}: {n} records, {audio:.0f} s of audio; one CPU thread")
        decodes = Decodes()
        runs = {}
        for name, fn in (("three passes", three_passes), ("one pass", one_pass)):
            before = decodes.count
            cpu, wall = cpu_s(
                lambda fn=fn, name=name: fn(
                    files, str(root), tmp / name, args.dnsmos_max_windows, args.batch_seconds
                )
            )
            runs[name] = cpu
            per = (decodes.count - before) / n
            print(
                f"{name:>13}: {cpu:7.1f} CPU-s ({cpu / n:.3f} a record, {wall:.1f} s wall), "
                f"{per:.2f} decodes a record"
            )
        parts = floor(records, str(root), args.dnsmos_max_windows, args.batch_seconds)
        floor_s = sum(parts.values())
        for part, spent in sorted(parts.items(), key=lambda kv: -kv[1]):
            print(f"{'':>15}{part:<22}{spent:7.2f} CPU-s ({100 * spent / floor_s:4.1f} %)")
        again = 2 * (
            parts["decode"] + parts["resample to 16 kHz"]
        )  # what the two passes after quality repeated
        print(
            f"{'':>15}the three passes repeat two decodes and resamples a record: {again:.1f} CPU-s, "
            f"{100 * again / (floor_s + again):.1f} % of the floor plus them; at best the one pass costs "
            f"{floor_s / (floor_s + again):.2f} of three"
        )
        print(
            f"{'floor':>13}: {floor_s:7.1f} CPU-s ({floor_s / n:.3f} a record): one decode, every measure "
            "and model, nothing else"
        )
        # On a GPU node the models run on the GPU: a record's CPU-s are its CPU side. The three passes'
        # CPU side held three decodes and resamples and the identity voices' GE2E (identity_part ran
        # it on CPU); the one pass's holds one of each and runs both GE2E variants on the GPU.
        cpu_side = parts["decode"] + parts["resample to 16 kHz"] + parts["signal measures"]
        cpu_side += parts["fingerprint + digest"]
        before = cpu_side + again + parts["GE2E, voices"]
        print(
            f"on a GPU node (derived from the parts above: the CPU side only): one pass {cpu_side / n:.4f} "
            f"CPU-s a record, three passes {before / n:.4f}: {cpu_side / before:.2f}"
        )
        print(f"one pass / three passes: {runs['one pass'] / runs['three passes']:.2f} (bar <= 0.8)")
        print(f"floor / one pass: {floor_s / runs['one pass']:.2f} (bar >= 0.9)")
        same = same_bytes(tmp / "three passes", tmp / "one pass")
        print(
            "same bytes as the three passes: "
            + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items())
        )


if __name__ == "__main__":
    main()
