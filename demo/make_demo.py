"""Regenerate the bundled demo corpus (demo/audio + demo/manifest.json) offline.

Needs Debian's `espeak-ng`, `flite`, `festival` and `festvox-kallpc16k`. Seven synthetic voices
(three flite voices built from real speakers' recordings, one festival diphone voice, three
espeak-ng variants), eight utterances each, at 16 kHz and 22.05 kHz, with Harvard sentences as
transcripts. One speaker's utterances are joined into a single "chapter" file and addressed by
offset, as long-form corpora are. Speaker ids are plain, so the prepare stage standardizes them.

Usage: python demo/make_demo.py   (from the repository root; overwrites demo/audio and the manifest)
"""

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

HERE = Path(__file__).resolve().parent
AUDIO = HERE / "audio"
UTTERANCES_PER_VOICE = 8
CHAPTER_GAP_SECONDS = 0.4

HARVARD = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening.",
    "Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall.",
    "The salt breeze came across from the sea.",
    "The girl at the booth sold fifty bonds.",
    "The small pup gnawed a hole in the sock.",
    "The fish twisted and turned on the bent hook.",
    "Press the pants and sew a button on the vest.",
    "The swan dive was far short of perfect.",
    "The beauty of the view stunned the young boy.",
    "Two blue fish swam in the tank.",
    "Her purse was full of useless trash.",
    "The colt reared and threw the tall rider.",
    "It snowed, rained, and hailed the same morning.",
    "Read verse out loud for pleasure.",
    "Hoist the load to your left shoulder.",
    "Take the winding path to reach the lake.",
    "Note closely the size of the gas tank.",
    "Wipe the grease off his dirty face.",
    "Mend the coat before you go out.",
    "The wrist was badly strained and hung limp.",
    "The stray cat gave birth to kittens.",
    "The young girl gave no clear response.",
    "The meal was cooked before the bell rang.",
    "What joy there is in living.",
    "A king ruled the state in the early days.",
    "The ship was torn apart on the sharp reef.",
    "Sickness kept him home the third week.",
    "The wide road shimmered in the hot sun.",
    "The lazy cow lay in the cool grass.",
    "Lift the square stone over the fence.",
    "The rope will bind the seven books at once.",
    "Hop over the fence and plunge in.",
    "The friendly gang left the drug store.",
    "Mesh wire keeps chicks inside.",
    "The frosty air passed through the coat.",
    "The crooked maze failed to fool the mouse.",
    "The show was a flop from the very start.",
    "A saw is a tool used for making boards.",
    "The wagon moved on well oiled wheels.",
    "March the soldiers past the next hill.",
    "A cup of sugar makes sweet fudge.",
    "Place a rosebush near the porch steps.",
    "Both lost their lives in the raging storm.",
    "The pipe began to rust while new.",
]

# speaker id -> argv prefix; the text goes last (flite/espeak) or on stdin (festival).
VOICES = {
    "awb": ["flite", "-voice", "awb"],
    "rms": ["flite", "-voice", "rms"],
    "slt": ["flite", "-voice", "slt"],
    "kal": ["text2wave", "-eval", "(voice_kal_diphone)"],
    "us_m3": ["espeak-ng", "-v", "en-us+m3", "-s", "150"],
    "gb_f2": ["espeak-ng", "-v", "en-gb+f2", "-s", "150"],
    "us_f4": ["espeak-ng", "-v", "en-us+f4", "-s", "140"],
}
CHAPTER_SPEAKER = "kal"


def synthesize(voice: list[str], text: str, wav: Path) -> tuple[np.ndarray, int]:
    """Run one TTS engine on `text` and return (16-bit samples, rate)."""
    if voice[0] == "text2wave":
        subprocess.run([*voice, "-o", str(wav)], input=text, text=True, check=True)
    elif voice[0] == "flite":
        subprocess.run([*voice, "-t", text, "-o", str(wav)], check=True)
    else:
        subprocess.run([*voice, "-w", str(wav), text], check=True)
    samples, rate = sf.read(wav, dtype="int16")
    return samples, rate


def utterance_text(voice_index: int, utt_index: int) -> str:
    """Each voice reads different sentences; every other utterance joins two, for longer clips."""
    base = (voice_index * UTTERANCES_PER_VOICE + utt_index) % len(HARVARD)
    text = HARVARD[base]
    if utt_index % 2 == 0:
        text = f"{text} {HARVARD[(base + 31) % len(HARVARD)]}"
    return text


def main() -> None:
    if AUDIO.exists():
        shutil.rmtree(AUDIO)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for v, (speaker, voice) in enumerate(VOICES.items()):
            (AUDIO / speaker).mkdir(parents=True)
            clips = []
            for u in range(UTTERANCES_PER_VOICE):
                text = utterance_text(v, u)
                samples, rate = synthesize(voice, text, Path(tmp) / "out.wav")
                clips.append((text, samples, rate))
            if speaker == CHAPTER_SPEAKER:
                rate = clips[0][2]
                gap = np.zeros(int(CHAPTER_GAP_SECONDS * rate), dtype=np.int16)
                rel = f"{speaker}/{speaker}_chapter01.flac"
                pieces, offset = [gap], len(gap)
                for text, samples, _ in clips:
                    records.append(_record(rel, text, speaker, len(samples) / rate, offset / rate))
                    pieces += [samples, gap]
                    offset += len(samples) + len(gap)
                sf.write(AUDIO / rel, np.concatenate(pieces), rate, subtype="PCM_16")
                continue
            for u, (text, samples, rate) in enumerate(clips):
                rel = f"{speaker}/{speaker}_{u:03d}.flac"
                sf.write(AUDIO / rel, samples, rate, subtype="PCM_16")
                records.append(_record(rel, text, speaker, len(samples) / rate, None))
    with open(HERE / "manifest.json", "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    print(f"wrote {len(records)} utterances of {len(VOICES)} voices under {AUDIO}")


def _record(rel: str, text: str, speaker: str, duration: float, offset: float | None) -> dict:
    record = {"audio_filepath": rel, "duration": round(duration, 6)}
    if offset is not None:
        record["offset"] = round(offset, 6)
    # no normalized_text: the text stage gives each record NeMo's normalizer's spoken form (docs: text)
    record.update(text=text, speaker=speaker)
    return record


if __name__ == "__main__":
    main()
