"""A long-form test corpus with its truth, made from the demo's voices (issue 75).

Each recording is a conversation of 2-4 demo voices: turns of two to six utterances, pauses inside
a turn and between turns drawn log-uniformly from 0.1 to 3 s, each utterance at its own level
(±3 dB), pink background noise about 25 dB under the speech, one stretch of synthetic music (notes
with harmonics) alone and one stretch where two voices speak at once. The utterances are the demo's
files trimmed to their speech (a 10 ms frame is speech when it is within 35 dB of the file's
loudest), a file of two sentences cut at the pause between them into two utterances, so an
utterance's edges in the truth are its speech's edges. The truth beside each
recording (`<name>.truth.json`) lists every utterance (start, end, speaker, text; the two that
overlap are marked `overlapped`), the overlap stretches (where both voices sound) and the music
stretches, in seconds.

Usage: python benchmarks/longform/corpus.py OUT [--recordings 20] [--minutes 2 10] [--seed 0]
"""

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

RATE = 16000
# Two espeak-ng variants of one formant voice (en-gb+f2, en-us+m3) that the GE2E embedder cannot tell
# apart in 1 s windows: in the corpus, the mean of one voice's speech spans and the other's are 0.95
# similar, as similar as that voice's own spans are to their mean (0.95-0.96). They are never put in
# one recording (docs: segment).
ALIKE = (("gb_f2", "us_m3"),)
DEMO = Path(__file__).resolve().parents[2] / "demo"


def trim(wave: np.ndarray, floor_db: float = -35.0) -> np.ndarray:
    """The wave from its first to its last 10 ms frame within `floor_db` of its loudest frame."""
    hop = RATE // 100
    frames = wave[: len(wave) // hop * hop].reshape(-1, hop)
    level = 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() + floor_db)
    return wave[loud[0] * hop : (loud[-1] + 1) * hop] if len(loud) else wave[:0]


def demo_voices(demo: Path = DEMO, keep=None) -> dict[str, list[tuple[np.ndarray, str]]]:
    """Every demo voice's utterances at 16 kHz, trimmed to speech, with their text (only the manifest
    records for which `keep(record)` is true, when given)."""
    voices: dict[str, list[tuple[np.ndarray, str]]] = {}
    for line in (demo / "manifest.json").read_text().splitlines():
        rec = json.loads(line)
        if keep is not None and not keep(rec):
            continue
        info = sf.info(demo / "audio" / rec["audio_filepath"])
        start = int(round(rec.get("offset", 0.0) * info.samplerate))
        frames = int(round(rec["duration"] * info.samplerate))
        wave, rate = sf.read(
            demo / "audio" / rec["audio_filepath"], start=start, frames=frames, dtype="float32"
        )
        if wave.ndim > 1:
            wave = wave.mean(axis=1)
        if rate != RATE:
            wave = soxr.resample(wave, rate, RATE).astype(np.float32)
        for part, text in sentences(trim(wave), rec["text"]):
            part = part / (np.sqrt(np.mean(part**2)) + 1e-9) * 0.1  # -20 dBFS
            voices.setdefault(rec["speaker"], []).append((part.astype(np.float32), text))
    return voices


def sentences(wave: np.ndarray, text: str) -> list[tuple[np.ndarray, str]]:
    """A demo file of two sentences as two utterances, cut at the quietest 100 ms between 25 % and
    75 % of it (the pause a speaker makes between sentences), each trimmed to its speech."""
    parts = [p if p.endswith(".") else p + "." for p in text.split(". ")]
    if len(parts) != 2:
        return [(wave, text)]
    hop = RATE // 100
    level = np.convolve(wave[: len(wave) // hop * hop].reshape(-1, hop).std(axis=1), np.ones(10), "same")
    lo, hi = len(level) // 4, 3 * len(level) // 4
    cut = (lo + int(np.argmin(level[lo:hi]))) * hop
    return [(trim(wave[:cut]), parts[0]), (trim(wave[cut:]), parts[1])]


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """n samples of pink (1/f) noise at unit RMS."""
    spectrum = rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(n // 2 + 1)
    spectrum /= np.sqrt(np.maximum(np.arange(n // 2 + 1), 1))
    noise = np.fft.irfft(spectrum, n)
    return (noise / (np.sqrt(np.mean(noise**2)) + 1e-12)).astype(np.float32)


def music(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Synthetic music: notes of a pentatonic scale, 0.2-0.5 s each, three harmonics and a decay."""
    out, t = [], 0.0
    while t < seconds:
        length = min(float(rng.uniform(0.2, 0.5)), seconds - t)
        n = max(int(length * RATE), 1)
        f0 = 220.0 * 2 ** (int(rng.choice([0, 2, 4, 7, 9, 12, 14])) / 12)
        x = np.arange(n) / RATE
        note = sum(np.sin(2 * np.pi * f0 * k * x) / k for k in (1, 2, 3))
        out.append((note * np.exp(-3 * x)).astype(np.float32))
        t += length
    wave = np.concatenate(out)
    return (wave / (np.sqrt(np.mean(wave**2)) + 1e-9) * 0.08).astype(np.float32)


def pause(rng: np.random.Generator) -> float:
    """A pause's length, log-uniform from 0.1 to 3 s."""
    return float(np.exp(rng.uniform(np.log(0.1), np.log(3.0))))


def make_recording(voices: dict, speakers: list[str], seconds: float, rng: np.random.Generator):
    """One recording of about `seconds` and its truth (a dict in seconds)."""
    pieces: list[tuple[int, np.ndarray]] = []  # (start sample, audio) to add
    utterances, overlaps, music_spans = [], [], []
    cursor = int(rng.uniform(0.5, 1.5) * RATE)
    speaker = None
    turns = 0
    special = {"music": int(rng.integers(1, 4)), "overlap": int(rng.integers(4, 7))}

    def place(voice: str, gain: float) -> tuple[int, int, str]:
        wave, text = voices[voice][int(rng.integers(len(voices[voice])))]
        pieces.append((cursor, wave * np.float32(gain)))
        return cursor, cursor + len(wave), text

    while cursor < seconds * RATE or turns <= max(special.values()):
        turns += 1
        if turns == special["music"]:
            wave = music(float(rng.uniform(4, 8)), rng)
            pieces.append((cursor, wave))
            music_spans.append({"start": cursor / RATE, "end": (cursor + len(wave)) / RATE})
            cursor += len(wave) + int(pause(rng) * RATE)
            continue
        if turns == special["overlap"]:
            a, b = (str(x) for x in rng.choice(speakers, 2, replace=False))
            start_a, end_a, text_a = place(a, 1.0)
            cursor = start_a + int(rng.uniform(0.0, 0.3) * RATE)
            start_b, end_b, text_b = place(b, 1.0)
            for who, start, end, text in ((a, start_a, end_a, text_a), (b, start_b, end_b, text_b)):
                utterances.append(
                    {
                        "start": start / RATE,
                        "end": end / RATE,
                        "speaker": who,
                        "text": text,
                        "overlapped": True,
                    }
                )
            overlaps.append({"start": start_b / RATE, "end": min(end_a, end_b) / RATE, "speakers": [a, b]})
            cursor = max(end_a, end_b) + int(pause(rng) * RATE)
            continue
        speaker = str(rng.choice([s for s in speakers if s != speaker]))
        for i in range(int(rng.integers(2, 7))):
            if i:
                cursor += int(pause(rng) * RATE)
            start, end, text = place(speaker, 10 ** (rng.uniform(-3, 3) / 20))
            utterances.append({"start": start / RATE, "end": end / RATE, "speaker": speaker, "text": text})
            cursor = end
        cursor += int(pause(rng) * RATE)
    total = cursor + int(rng.uniform(0.5, 1.5) * RATE)
    audio = pink_noise(total, rng) * np.float32(0.1 * 10 ** (-rng.uniform(22, 28) / 20))
    for start, wave in pieces:
        audio[start : start + len(wave)] += wave
    truth = {
        "duration": total / RATE,
        "speakers": sorted(speakers),
        "utterances": utterances,
        "overlaps": overlaps,
        "music": music_spans,
    }
    return np.clip(audio, -1, 1), truth


def pick_speakers(names: list[str], count: int, rng: np.random.Generator) -> list[str]:
    """`count` voices for a recording, never two of one ALIKE pair."""
    while True:
        chosen = [str(s) for s in rng.choice(names, count, replace=False)]
        if not any(set(pair) <= set(chosen) for pair in ALIKE):
            return chosen


def write_corpus(
    out: Path, recordings: int = 20, minutes: tuple[float, float] = (2, 10), seed: int = 0
) -> list[Path]:
    """`recordings` FLAC recordings under `out`, each with its truth beside it; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    voices = demo_voices()
    names = sorted(voices)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(recordings):
        speakers = pick_speakers(names, int(rng.integers(2, 5)), rng)
        seconds = float(rng.uniform(*minutes)) * 60
        audio, truth = make_recording(voices, speakers, seconds, rng)
        path = out / f"rec_{i:03d}.flac"
        sf.write(path, audio, RATE)
        path.with_suffix(".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--recordings", type=int, default=20)
    ap.add_argument("--minutes", type=float, nargs=2, default=(2, 10))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    paths = write_corpus(args.out, args.recordings, tuple(args.minutes), args.seed)
    hours = sum(sf.info(p).duration for p in paths) / 3600
    print(f"{len(paths)} recordings, {hours:.2f} h, under {args.out}")


if __name__ == "__main__":
    main()
