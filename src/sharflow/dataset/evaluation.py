"""The evaluation hand-off of a test split: a manifest in the form MagpieTTS's evaluation reads.

NeMo's `scripts/magpietts/infer_and_evaluate.py` reads NeMo JSON lines whose `audio_filepath` and
`context_audio_filepath` are relative to a dataset's `audio_dir` (an entry of `dataset_meta_info`,
`evalset_config.py`), copies whole files and reads context audio from offset 0. So each cut of the
test split's Shar is exported as two files, cut from what the shards store: its target audio
(`audio/<cut id>.wav`) and its context audio (`context/<cut id>.wav`), 16-bit WAV at the Shar's
rate. One cut at a time: memory is one cut's audio.
"""

import glob
import json
import logging
import os
from pathlib import Path

import numpy as np

from sharflow.core.atomic import atomic_dir, write_json
from sharflow.core.shar_fields import AUDIO_FIELDS, CUTS
from sharflow.core.shar_index import INDEX_SUFFIX

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
META = "dataset_meta_info.json"


def _shar_fields(shar_dir: str) -> dict[str, list[str]]:
    """{field: shard files} of a Shar set's cuts and audio (not their indexes), for lhotse's
    CutSet.from_shar."""
    fields = {CUTS.field: CUTS.folder}
    fields.update({f.field: f.folder for f in AUDIO_FIELDS})
    return {
        field: sorted(
            p for p in glob.glob(os.path.join(shar_dir, folder, "*")) if not p.endswith(INDEX_SUFFIX)
        )
        for field, folder in fields.items()
    }


def _write_wav(path: Path, samples: np.ndarray, rate: int) -> float:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, samples[0], rate, subtype="PCM_16", format="WAV")
    return samples.shape[1] / rate


def manifest_record(cut, target: str, target_seconds: float, context: str, context_seconds: float) -> dict:
    """The evaluation manifest's line of a cut: its files (relative to the audio_dir), durations,
    text and speaker as the Shar holds them."""
    sup = cut.supervisions[0]
    record = {
        "audio_filepath": target,
        "duration": target_seconds,
        "text": sup.text,
        "speaker": sup.speaker,
        "context_audio_filepath": context,
        "context_audio_duration": context_seconds,
    }
    custom = sup.custom or {}
    for key in ("normalized_text", "context_audio_text", "context_speaker_similarity"):
        if key in custom:
            record[key] = custom[key]
    return {**record, "cut_id": cut.id}


def export_evaluation_set(name: str, *, shar_dir: str, out_dir: str, path_prefix: str | None = None) -> dict:
    """Export a test split's Shar set (`shar_dir`) to `out_dir` (manifest.json, audio/, context/,
    dataset_meta_info.json: `{name: {manifest_path, audio_dir, feature_dir}}`), atomically."""
    from lhotse import CutSet
    from tqdm import tqdm

    fields = _shar_fields(shar_dir)
    count = seconds = 0.0
    with atomic_dir(out_dir) as tmp:
        with open(tmp / MANIFEST, "w", encoding="utf-8") as manifest:
            cuts = CutSet.from_shar(fields=fields) if fields[CUTS.field] else []
            for cut in tqdm(cuts, desc=f"export {name}", unit="cut", mininterval=5):
                target, context = f"audio/{cut.id}.wav", f"context/{cut.id}.wav"
                t = _write_wav(tmp / target, cut.target_audio.load_audio(), cut.target_audio.sampling_rate)
                c = _write_wav(tmp / context, cut.context_audio.load_audio(), cut.context_audio.sampling_rate)
                manifest.write(
                    json.dumps(manifest_record(cut, target, t, context, c), ensure_ascii=False) + "\n"
                )
                count, seconds = count + 1, seconds + t
        where = os.path.abspath(out_dir)
        if path_prefix:
            where = path_prefix.rstrip("/") + "/" + Path(out_dir).as_posix()
        meta = {name: {"manifest_path": f"{where}/{MANIFEST}", "audio_dir": where, "feature_dir": None}}
        write_json(tmp / META, meta)
    log.info("evaluation set %s: %d utterances, %.3f h in %s", name, count, seconds / 3600, out_dir)
    return {"utterances": int(count), "hours": round(seconds / 3600, 6), **meta}
