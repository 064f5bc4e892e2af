"""Context-stage benchmarks; each figure is printed next to its floor or reference from this run.

1. selection: one speaker group of n = 10k, 50k, 100k synthetic 256-d embeddings — time and peak
   RSS of the blockwise top-k selection (1 torch thread, as a CPU rank runs; on the GPU with
   --device cuda), next to the exhaustive full-matrix-and-sort method where it fits (n = 10k);
   checks both choose the same contexts.
2. stage: plan + part + merge on the demo corpus repeated 8x (448 utterances, 30 min of audio),
   1 and 2 workers (one GPU rank with --device cuda): utterances/s and audio-seconds/s, next to the
   floor — decoding and embedding the same audio in the same batches in one process, nothing else.
3. balance: max/mean part cost of LPT for a Zipf-distributed list of speaker sizes.

Usage: python benchmarks/bench_context.py [--sizes 10000 50000 100000] [--skip-stage] [--device cpu|cuda]
"""

import argparse
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from _corpus import context_stage, prepare, proc_status_mb, repeated_demo


def synthetic_group(n: int, d: int = 256, seed: int = 0):
    """Embeddings of one speaker: a shared direction plus per-utterance variation (cosine ~0.6-0.9)."""
    rng = np.random.default_rng(seed)
    center = rng.normal(size=d)
    center /= np.linalg.norm(center)
    emb = center + 0.035 * rng.normal(size=(n, d)).astype(np.float32)
    return emb.astype(np.float32), rng.uniform(0.8, 12.0, n)


def _selection_job(n: int, method: str, device: str, queue) -> None:
    import torch

    from sharflow.context.selection import SelectionRules, select_context, select_context_exhaustive

    torch.set_num_threads(1)
    emb, dur = synthetic_group(n)
    rules = SelectionRules(min_similarity=0.6, min_duration=3.0, max_duration=10.0, top_k=32)
    select_context(emb[:10], dur[:10], rules, device=device)  # warm up the kernels outside the measurement
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (VmHWM) to the current RSS
    before = proc_status_mb("VmRSS")
    t = time.perf_counter()
    if method == "exhaustive":
        sel = select_context_exhaustive(emb, dur, rules)
    else:
        sel = select_context(emb, dur, rules, device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    queue.put((seconds, proc_status_mb("VmHWM") - before, sel.choice.tobytes(), sel.widened_rows))


def run_isolated(n: int, method: str, device: str = "cpu"):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_selection_job, args=(n, method, device, queue))
    p.start()
    result = queue.get()
    p.join()
    return result


def bench_selection(sizes: list[int], device: str) -> None:
    print(f"\n1. selection in one group on {device} (1 torch thread; memory = peak RSS growth during it,")
    print("   embeddings and durations given: n x 256 float32 = n/1000 MB)")
    print(f"{'n':>8}{'method':>12}{'seconds':>10}{'peak +MB':>10}{'rows widened':>14}")
    for n in sizes:
        t, mb, choice, widened = run_isolated(n, "topk", device)
        print(f"{n:>8}{'top-k':>12}{t:>10.2f}{mb:>10.0f}{widened:>14}")
        if n <= 10000:
            te, mbe, choice_e, _ = run_isolated(n, "exhaustive")
            print(f"{n:>8}{'exhaustive':>12}{te:>10.2f}{mbe:>10.0f}{'-':>14}")
            print(
                f"{'':>8}top-k / exhaustive: time {t / te:.3f}, memory {mb / max(mbe, 1):.3f}; "
                f"same choices: {choice == choice_e}"
            )


def bench_stage(device: str, times: int = 8) -> None:
    import torch

    from sharflow.context.part import PartSettings
    from sharflow.core.layout import DatasetFiles
    from sharflow.io.audio import load_span, resample, resolve_audio_path
    from sharflow.models.speaker_embedders import load_embedder

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        manifest, root = repeated_demo(tmp, times)
        base, records = prepare(tmp / "base", manifest, root)
        n, audio = len(records), sum(r["duration"] for r in records)

        torch.set_num_threads(1)
        settings = PartSettings(audio_root=str(root))
        rank_device = "cuda:0" if device == "cuda" else "cpu"
        embedder = load_embedder("ge2e", rank_device)
        t = time.perf_counter()
        by_speaker = {}
        for r in records:
            by_speaker.setdefault(r["speaker"], []).append(r)
        for group in by_speaker.values():
            for i in range(0, len(group), settings.embed_batch):
                waves = [
                    resample(
                        *load_span(
                            resolve_audio_path(str(root), r["audio_filepath"])[0], r["offset"], r["duration"]
                        ),
                        16000,
                    )
                    for r in group[i : i + settings.embed_batch]
                ]
                embedder.embed(waves)
        if device == "cuda":
            torch.cuda.synchronize()
        floor = time.perf_counter() - t

        results = {}
        for workers in (1, 2) if device == "cpu" else (1,):
            files = DatasetFiles(str(tmp / f"ctx{workers}"))
            shutil.copytree(Path(base.prepared).parent, Path(files.prepared).parent)
            t = time.perf_counter()
            context_stage(files, audio_root=root, workers=workers, device=device)
            results[workers] = (time.perf_counter() - t, Path(files.with_context).read_bytes())

    print(f"\n2. context stage on the demo corpus x{times}: {n} utterances, {audio:.0f} s of audio, {device}")
    print(f"{'run':<44}{'seconds':>9}{'utt/s':>9}{'audio s/s':>11}")
    rows = [(f"floor: decode + embed, 1 process ({rank_device})", floor)] + [
        (f"stage (plan+part+merge), {w} worker(s)", results[w][0]) for w in results
    ]
    for name, s in rows:
        print(f"{name:<44}{s:>9.2f}{n / s:>9.1f}{audio / s:>11.0f}")
    line = f"1 worker / floor speed: {floor / results[1][0]:.2f}"
    if 2 in results:
        line += (
            f";  2 workers / 1 worker: {results[1][0] / results[2][0]:.2f}x;  outputs identical: "
            f"{results[1][1] == results[2][1]}"
        )
    print(line)


def bench_balance() -> None:
    from sharflow.context.plan import group_cost
    from sharflow.work.balance import imbalance, loads, lpt_assign

    rng = np.random.default_rng(0)
    print("\n3. balance of LPT over Zipf(a=1.8) speaker sizes, 8 s per utterance, cost n^2 + 1e6*seconds")
    print(f"{'speakers':>9}{'parts':>7}{'max/mean':>10}{'bound':>8}")
    for speakers, parts in [(2000, 8), (2000, 32), (20000, 64)]:
        sizes = rng.zipf(1.8, speakers).clip(1, 5000)
        costs = {f"s{i:06d}": group_cost(int(k), 8.0 * k, 1e6) for i, k in enumerate(sizes)}
        mean = sum(costs.values()) / parts
        bound = max(1.0, max(costs.values()) / mean)  # no assignment can beat the largest group
        got = imbalance(loads(lpt_assign(costs, parts), costs))
        print(f"{speakers:>9}{parts:>7}{got:>10.4f}{bound:>8.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 50000, 100000])
    parser.add_argument("--skip-stage", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    bench_balance()
    if not args.skip_stage:
        bench_stage(args.device)
    bench_selection(args.sizes, args.device)


if __name__ == "__main__":
    main()
