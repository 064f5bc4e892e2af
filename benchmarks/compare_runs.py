"""Compare two finished runs of the workflow file by file; exit 1 on any difference.

For every dataset (or the one named): every file of results/<dataset>/ in either run — prepared,
quality metrics and kept records, with_context, every reject file, the context and shard plans, every
Shar field of every shard (codes included), shard catalog fragments, the catalog, buckets, the card,
verify.json and every stats file — plus results/input_cfg.yaml. JSON files are compared as data
with their timing fields (TIMING) left out; input_cfg.yaml with each run's own results folder
written as `<results>`; everything else byte for byte. The report folder (plots of timings) and the
model files are not compared.

Where codes or context differ (a GPU run against a CPU run: convolutions round differently, and a
value near a quantizer boundary flips), it also prints how close they are: the share of equal
context choices and of equal codes.

Usage: python benchmarks/compare_runs.py RESULTS_A RESULTS_B [--dataset demo]
"""

import argparse
import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

TIMING = {"seconds", "rank_seconds", "shard_seconds"}  # wall times: differ from run to run


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def same(a: Path, b: Path) -> bool:
    if a.read_bytes() == b.read_bytes():
        return True
    if a.suffix == ".json":
        return without_timing(json.loads(a.read_text())) == without_timing(json.loads(b.read_text()))
    if a.name == "input_cfg.yaml":
        return a.read_text().replace(str(a.parent.resolve()), "<results>") == b.read_text().replace(
            str(b.parent.resolve()), "<results>"
        )
    return False


def files_of(folder: Path) -> set[str]:
    return (
        {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
    )


def compare_tree(a: Path, b: Path, label: str) -> list[str]:
    """Every file under a and b: 'DIFFERENT' / 'only in A' / 'only in B' lines; prints a summary."""
    names_a, names_b = files_of(a), files_of(b)
    problems = [f"only in A  {label}/{n}" for n in sorted(names_a - names_b)]
    problems += [f"only in B  {label}/{n}" for n in sorted(names_b - names_a)]
    both = sorted(names_a & names_b)
    problems += [f"DIFFERENT  {label}/{n}" for n in both if not same(a / n, b / n)]
    different = sum("DIFFERENT" in p for p in problems)
    print(f"{label}: {len(both)} files in both runs, {len(both) - different} equal")
    return problems


def codes_of(tar_path: Path) -> dict[str, np.ndarray]:
    with tarfile.open(tar_path) as tar:
        return {
            m.name[:-4]: np.load(io.BytesIO(tar.extractfile(m).read()))
            for m in tar.getmembers()
            if m.name.endswith(".npy")
        }


def context_choices(path: Path) -> dict[tuple, tuple]:
    """(audio_filepath, offset) -> (context file, context offset, similarity) of a with_context.jsonl."""
    choices = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            choices[(r["audio_filepath"], r["offset"])] = (
                r["context_audio_filepath"],
                r["context_audio_offset"],
                r["context_speaker_similarity"],
            )
    return choices


def closeness(a: Path, b: Path) -> None:
    """How close the context choices and codes of one dataset are (for runs on different devices)."""
    if all((x / "context" / "with_context.jsonl").exists() for x in (a, b)):
        ca, cb = (context_choices(x / "context" / "with_context.jsonl") for x in (a, b))
        shared = ca.keys() & cb.keys()
        agree = sum(ca[k][:2] == cb[k][:2] for k in shared)
        gap = max((abs(ca[k][2] - cb[k][2]) for k in shared), default=0.0)
        print(f"  context choices equal: {agree} of {len(shared)}; largest similarity difference {gap:.2e}")
    for codec_dir in sorted((a / "shar").glob("codes_*")):
        frames = equal = arrays = equal_arrays = 0
        for kind in ("target_codes", "context_codes"):
            for tar in sorted((codec_dir / kind).iterdir()):
                other = b / "shar" / codec_dir.name / kind / tar.name
                if not other.exists():
                    continue
                y = codes_of(other)
                for cid, codes in codes_of(tar).items():
                    if cid not in y or codes.shape != y[cid].shape:
                        continue
                    frames += codes.size
                    equal += int((codes == y[cid]).sum())
                    arrays += 1
                    equal_arrays += bool(np.array_equal(codes, y[cid]))
        share = equal / frames if frames else 1.0
        print(
            f"  {codec_dir.name}: {share:.5f} of {frames} codes equal; "
            f"{equal_arrays} of {arrays} utterances identical"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="a results folder")
    parser.add_argument("b", type=Path, help="another results folder")
    parser.add_argument("--dataset", help="only this dataset (default: every dataset of either run)")
    args = parser.parse_args()
    datasets = (
        [args.dataset]
        if args.dataset
        else sorted(
            p.name
            for run in (args.a, args.b)
            for p in run.iterdir()
            if p.is_dir() and p.name not in ("report", "models")
        )
    )
    problems = []
    for ds in dict.fromkeys(datasets):
        found = compare_tree(args.a / ds, args.b / ds, ds)
        if any("/context/" in p or "/shar/" in p for p in found):
            closeness(args.a / ds, args.b / ds)
        problems += found
    for name in ("input_cfg.yaml",):
        if not same(args.a / name, args.b / name):
            problems.append(f"DIFFERENT  {name}")
    print("\n".join(problems) if problems else "every compared file is equal")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
