"""Regenerate the demo's degraded utterances (demo/degraded/) from the clean demo audio, offline.

The `degraded` dataset of config/config.yaml: voice slt's eight clean utterances (read from
demo/audio) plus one damaged copy per quality metric the demo's filters act on, so that a demo
run shows each filter rejecting what it is for, and the report has quality rejects to show:

- white noise at 0 dB SNR                      -> dnsmos_bak
- low-passed at 4 kHz (16 kHz file)            -> bandwidth_hz
- 2 s of silence before the speech             -> leading_silence
- 2 s of silence after the speech              -> trailing_silence
- full scale: amplified 8x and clipped         -> clipping_fraction
- clean audio, a transcript that is not its own (five sentences for a one-sentence clip)
                                               -> speaking_rate
- silence only                                 -> speech_ratio (the default filter)

Deterministic (seeded noise); needs only numpy, scipy and soundfile.
Usage: python demo/make_degraded.py   (from the repository root; overwrites demo/degraded)
"""

import json
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import butter, sosfiltfilt

HERE = Path(__file__).resolve().parent
OUT = HERE / "degraded"
SPEAKER = "slt"
SILENCE_SECONDS = 2.0
WRONG_TEXT = (
    "Four hours of steady work faced us. A large size in stockings is hard to sell. The boy was "
    "there when the sun rose. A rod is used to catch pink salmon. The source of the huge river is "
    "the clear spring."
)


def clean_records() -> list[dict]:
    lines = (HERE / "manifest.json").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["speaker"] == SPEAKER]


def degrade(kind: str, audio: np.ndarray, rate: int) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, kind)))
    if kind == "noise_0db":
        noise = rng.standard_normal(len(audio))
        noise *= np.sqrt(np.mean(audio**2) / np.mean(noise**2))  # equal power: 0 dB SNR
        return np.clip(audio + noise, -1, 1)
    if kind == "lowpass_4khz":
        return sosfiltfilt(butter(10, 4000, fs=rate, output="sos"), audio)
    silence = np.zeros(int(SILENCE_SECONDS * rate))
    if kind == "leading_silence":
        return np.concatenate([silence, audio])
    if kind == "trailing_silence":
        return np.concatenate([audio, silence])
    if kind == "clipped":
        return np.clip(audio * 8, -1, 1)
    if kind == "wrong_text":
        return audio  # the damage is in the manifest
    if kind == "silence_only":
        return np.zeros_like(audio)
    raise ValueError(kind)


KINDS = (
    "noise_0db",
    "lowpass_4khz",
    "leading_silence",
    "trailing_silence",
    "clipped",
    "wrong_text",
    "silence_only",
)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    clean = clean_records()
    records = [dict(r, audio_filepath=f"audio/{r['audio_filepath']}") for r in clean]
    for i, kind in enumerate(KINDS):
        source = clean[i]
        audio, rate = sf.read(HERE / "audio" / source["audio_filepath"], dtype="float64")
        damaged = degrade(kind, audio, rate)
        rel = f"degraded/{SPEAKER}_{i:03d}_{kind}.flac"
        sf.write(HERE / rel, damaged, rate, subtype="PCM_16")
        text = WRONG_TEXT if kind == "wrong_text" else source["text"]
        records.append(
            {
                "audio_filepath": rel,
                "duration": round(len(damaged) / rate, 6),
                "text": text,
                "speaker": SPEAKER,
            }
        )
    with open(OUT / "manifest.json", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    print(f"wrote {len(KINDS)} degraded + {len(clean)} clean records of {SPEAKER} under {OUT}")


if __name__ == "__main__":
    main()
