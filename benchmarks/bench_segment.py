"""The long-form segmentation's accuracy against the test corpus's truth, and its throughput next to
its floor (issue 75).

1. accuracy: every recording of the corpus (made by benchmarks/longform/corpus.py from the demo's
   voices: 20 recordings of 2-10 minutes, 2-4 speakers each, unless --corpus names one already
   made) segmented with the shipped models (Silero VAD, GE2E) and the default settings; prints the
   issue's measures over all recordings and the worst recording's: segment edges within 0.3 s of a
   true utterance edge, purity by speech time, single-speaker speech kept, overlap and music
   stretches kept, the adjusted Rand index of the speakers; the speakers linked across recordings
   at link_similarity 0.96 against the truth's voices; and where the seconds went.
2. throughput: audio-seconds a second of the whole segmentation (one rank, this process), next to
   its floor measured in the same run: the models alone on the same audio (the VAD over the same
   chunks, the embedder over the same windows), nothing else.

Usage: python benchmarks/bench_segment.py [--corpus DIR] [--recordings 20] [--minutes 2 10]
       [--device cpu|cuda] [--threads N]
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from longform.corpus import write_corpus

from sharflow.segment import turns
from sharflow.segment.link import Linker
from sharflow.segment.recording import Segmenter
from sharflow.segment.score import Score, link_pairs, score, true_speaker

LINK = 0.96  # the link_similarity docs/segment recommends for GE2E


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, help="a corpus made by longform/corpus.py (default: make one)")
    ap.add_argument("--recordings", type=int, default=20)
    ap.add_argument("--minutes", type=float, nargs=2, default=(2, 10))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on a CPU rank (default 1)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if corpus is None:
            t = time.perf_counter()
            corpus = Path(tmp) / "corpus"
            write_corpus(corpus, args.recordings, tuple(args.minutes))
            print(f"corpus: {args.recordings} recordings made in {time.perf_counter() - t:.1f} s")
        run(sorted(corpus.glob("*.flac")), args.device)


def run(paths: list[Path], device: str) -> None:
    segmenter = Segmenter(device)
    total, worst = Score(), {}
    seconds: dict[str, float] = {}
    audio_seconds = stage = 0.0
    floor = {"vad": 0.0, "embedder": 0.0}
    linker, true, names = Linker(LINK), [], []
    for path in paths:
        audio, rate = sf.read(path, dtype="float32")
        assert rate == turns.RATE
        truth = json.loads(path.with_suffix(".truth.json").read_text())
        t = time.perf_counter()
        result = segmenter.segment(audio)
        stage += time.perf_counter() - t
        audio_seconds += len(audio) / rate
        # the floor: the models alone on the same audio (the same chunks, the same windows)
        t = time.perf_counter()
        probs = segmenter.probabilities(audio)
        floor["vad"] += time.perf_counter() - t
        wins = turns.windows(turns.speech_spans(probs, len(audio), segmenter.turns), segmenter.turns)
        t = time.perf_counter()
        segmenter.embed(audio, wins)
        floor["embedder"] += time.perf_counter() - t
        for what, value in result.seconds().items():
            seconds[what] = seconds.get(what, 0.0) + value
        # linking across recordings: each recording speaker's true voice (most of its segments')
        voices = [
            [true_speaker(truth, s / rate, e / rate) for s, e, label in result.segments if label == k]
            for k in range(len(result.voices))
        ]
        true += [max(set(v), key=v.count) for v in voices]
        own = [f"{path.stem}-s{k}" for k in range(len(result.voices))]
        names += linker.recording(result.voices, own, [False] * len(own))
        segs = [{"start": s / rate, "end": e / rate, "speaker": k} for s, e, k in result.segments]
        one = score(truth, segs)
        total.add(one)
        for name, value in (("edges", one.edge_rate), ("purity", one.purity), ("kept", one.coverage)):
            worst[name] = min(worst.get(name, (1.0, "")), (value, path.name))
        print(
            f"{path.name}: {len(audio) / rate / 60:.1f} min, {len(truth['speakers'])} speakers, "
            f"{result.speakers} found, {len(result.segments)} segments, ARI {one.ari:.3f}"
        )
    summary = total.summary()
    print("\naccuracy over", len(paths), "recordings:", f"{audio_seconds / 3600:.2f} h")
    bars = {
        "edges_within_tolerance": (">=", 0.90),
        "purity": (">=", 0.98),
        "single_speaker_speech_kept": (">=", 0.85),
        "adjusted_rand_index": (">=", 0.90),
    }
    for name, value in summary.items():
        bar = bars.get(name)
        print(f"  {name}: {value}" + (f"   (bar {bar[0]} {bar[1]})" if bar else ""))
    for name, (value, where) in worst.items():
        print(f"  worst recording's {name}: {value:.4f} ({where})")
    print(f"\nspeakers linked across recordings (link_similarity {LINK}):")
    print(f"  {len(names)} recording speakers, {len(set(true))} true voices, {len(set(names))} names")
    print(f"  pairs of recording speakers: {link_pairs(true, names)}")
    print("\nwhere the seconds went:")
    for what, value in seconds.items():
        print(f"  {what}: {value:.1f} s ({value / audio_seconds:.1%})")
    print(f"  sum: {sum(seconds.values()):.3f} s of {audio_seconds:.3f} s in")
    models = sum(floor.values())
    print(f"\nthroughput on {segmenter.vad.device} ({torch.get_num_threads()} torch threads):")
    print(f"  floor, the models alone: {audio_seconds / models:.1f} audio-s/s ({floor})")
    print(
        f"  the segmentation: {audio_seconds / stage:.1f} audio-s/s, "
        f"{models / stage:.2f} of its floor (bar >= 0.8)"
    )


if __name__ == "__main__":
    main()
