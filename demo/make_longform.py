"""Regenerate the demo's long recordings (demo/longform/), offline: the `talks` dataset of
config/config.yaml, a `long_form` dataset that the segment stage cuts into segments before the rest of
the workflow runs on them (docs: segment).

Two conversations of about 1.5 minutes between the same two demo voices, `awb` and `gb_f2`, made the
way the long-form test corpus is (benchmarks/longform/corpus.py): turns of two to six utterances,
pauses of 0.1 to 3 s, pink noise about 25 dB under the speech, one stretch of music alone and one of
the two voices at once, so that a demo run shows each reason a second is dropped. The utterances are
those of the demo dataset that its splits (config/config.yaml) keep in train: the identity check
finds a held-out utterance's audio even inside a long recording's segment, and rejects that segment
from train (docs: splits), as it should. The truth is written beside each recording
(`<name>.truth.json`).

Deterministic (seeded); needs numpy, soundfile and soxr.
Usage: python demo/make_longform.py   (from the repository root; overwrites demo/longform)
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
OUT = HERE / "longform"
VOICES = ["awb", "gb_f2"]
MINUTES = 1.25
RECORDINGS = 2
SEED = 3

sys.path.insert(0, str(HERE.parent / "benchmarks"))
from longform.corpus import RATE, demo_voices, make_recording  # noqa: E402


def in_train(record: dict) -> bool:
    """Whether the demo dataset's splits keep a manifest record in train."""
    from sharflow.core.config import load_yaml
    from sharflow.core.splits import TRAIN, SplitRules
    from sharflow.io.audio import span_key

    rules = SplitRules.from_config(
        load_yaml(HERE.parent / "config" / "config.yaml")["datasets"]["demo"]["splits"]
    )
    path = str(HERE / "audio" / record["audio_filepath"])
    span = span_key(path, record.get("offset", 0.0), record["duration"])
    return rules.split(record["speaker"], record["audio_filepath"], span) == TRAIN


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    voices = demo_voices(keep=lambda r: r["speaker"] in VOICES and in_train(r))
    rng = np.random.default_rng(SEED)
    for i in range(RECORDINGS):
        audio, truth = make_recording(voices, VOICES, MINUTES * 60, rng)
        path = OUT / f"talk_{i}.flac"
        sf.write(path, audio, RATE)
        path.with_suffix(".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        print(f"{path.relative_to(HERE.parent)}: {len(audio) / RATE:.1f} s")


if __name__ == "__main__":
    main()
