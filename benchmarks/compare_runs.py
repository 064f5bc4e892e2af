"""Compare two finished runs of the workflow, e.g. on a GPU and on CPU: what is equal, how close codes are.

For one dataset: byte equality of the prepare/context/shar outputs, the share of equal context
choices, and per codec the share of equal codes (all cuts, target and context) with the frames
where they differ. A GPU's convolutions round differently from a CPU's, so codes near a quantizer
boundary can flip; everything before the codec must be equal.

Usage: python benchmarks/compare_runs.py RESULTS_A RESULTS_B [--dataset demo]
"""

import argparse
import io
import json
import tarfile
from pathlib import Path

import numpy as np

from sharflow.core.layout import DatasetFiles


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--dataset", default="demo")
    args = parser.parse_args()
    a, b = args.a / args.dataset, args.b / args.dataset

    here = DatasetFiles(".")
    same = [here.prepared, here.with_context, here.shard_plan]
    same += sorted(
        str(p.relative_to(a))
        for f in ("cuts", "target_audio", "context_audio")
        for p in (a / "shar" / f).iterdir()
    )
    for name in same:
        print(f"{'equal' if (a / name).read_bytes() == (b / name).read_bytes() else 'DIFFERENT':<10} {name}")
    ca, cb = (
        context_choices(a / "context" / "with_context.jsonl"),
        context_choices(b / "context" / "with_context.jsonl"),
    )
    agree = sum(ca[k][:2] == cb[k][:2] for k in ca)
    gap = max(abs(ca[k][2] - cb[k][2]) for k in ca)
    print(f"context choices equal: {agree} of {len(ca)}; largest similarity difference {gap:.2e}")

    for codec_dir in sorted((a / "shar").glob("codes_*")):
        frames = equal = arrays = equal_arrays = 0
        for kind in ("target_codes", "context_codes"):
            for tar in sorted((codec_dir / kind).iterdir()):
                x, y = codes_of(tar), codes_of(b / "shar" / codec_dir.name / kind / tar.name)
                for cid, codes in x.items():
                    other = y[cid]
                    assert codes.shape == other.shape, (cid, codes.shape, other.shape)
                    frames += codes.size
                    equal += int((codes == other).sum())
                    arrays += 1
                    equal_arrays += bool(np.array_equal(codes, other))
        print(
            f"{codec_dir.name}: {equal / frames:.5f} of {frames} codes equal; {equal_arrays} of {arrays} "
            "utterances bit-identical"
        )


if __name__ == "__main__":
    main()
