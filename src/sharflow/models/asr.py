"""The quality stage's optional ASR check: transcribe with a NeMo ASR model, score against the text.

`quality.asr.model` is a NeMo ASR model name (downloaded by NeMo where there is internet) or a local
`.nemo`; any NeMo ASR model class (CTC, RNNT, hybrid, AED) loads through ASRModel and transcribes
through its own `transcribe()`. Each rank transcribes its records in batches of about
`batch_seconds` of audio, in line order.

One text normalization, applied to the reference and to the transcript before scoring (and to
the text that `speaking_rate` counts): Unicode NFKC, case folded, every character that is not a
letter, a combining mark, a digit or an apostrophe becomes a space, apostrophes at the edges of
words are dropped, runs of spaces become one. `cer` and `wer` are jiwer's character and word error
rates of the normalized transcript against the normalized reference (normalized_text where the
manifest has one, the spoken form an ASR model writes, else text); both are null when the
reference normalizes to nothing. They can exceed 1 (insertions).
"""

import logging
import unicodedata
from pathlib import Path

import numpy as np

from sharflow.core.errors import SharflowError

log = logging.getLogger(__name__)

ASR_METRICS = ("cer", "wer")
ASR_FIELDS = ("asr_text", *ASR_METRICS)
_KEPT_CATEGORIES = ("L", "M", "N")  # letters, combining marks, digits


def normalize_text(text: str) -> str:
    """The text as scored: NFKC, case folded, punctuation to spaces, inner apostrophes kept."""
    chars = [
        c if c == "'" or unicodedata.category(c)[0] in _KEPT_CATEGORIES else " "
        for c in unicodedata.normalize("NFKC", text).casefold()
    ]
    words = (w.strip("'") for w in "".join(chars).split())
    return " ".join(w for w in words if w)


def reference_text(record: dict) -> str:
    """What a record's audio says: its normalized_text (spoken form) if it has one, else its text."""
    return record.get("normalized_text") or record.get("text") or ""


def error_rates(reference: str, hypothesis: str) -> dict[str, float | None]:
    """{cer, wer} of a transcript against a reference, both normalized first (None: empty reference)."""
    import jiwer

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not ref:
        return {"cer": None, "wer": None}
    return {"cer": float(jiwer.cer(ref, hyp)), "wer": float(jiwer.wer(ref, hyp))}


def asr_fields(record: dict, transcript: str, digits: int = 6) -> dict:
    """{asr_text, cer, wer} of a record's transcript, the rates rounded to `digits` decimals."""
    rates = error_rates(reference_text(record), transcript)
    return {"asr_text": transcript, **{k: None if v is None else round(v, digits) for k, v in rates.items()}}


class Transcriber:
    """A NeMo ASR model on one device, transcribing lists of mono float32 clips at its sample rate."""

    def __init__(self, model: str, device: str = "cpu", random: bool = False):
        import torch
        from nemo.collections.asr.models import ASRModel

        try:
            if Path(model).suffix == ".nemo" or Path(model).exists():
                self.model = ASRModel.restore_from(model, map_location=torch.device(device))
            else:
                self.model = ASRModel.from_pretrained(model, map_location=torch.device(device))
        except Exception as e:
            raise SharflowError(
                f"could not load the NeMo ASR model {model!r}: {e}. Without internet, set "
                "quality.asr.model to a local .nemo file (or leave it null: no ASR check)."
            ) from None
        self.model.eval()
        self.sample_rate = int(self.model.cfg.sample_rate)
        if random:
            log.warning(
                "ASR model %s is RANDOMLY INITIALISED (quality.asr.random_from_config): its transcripts "
                "are random letters and asr_text, cer and wer mean NOTHING; for real data set "
                "quality.asr.model",
                model,
            )
        log.info(
            "ASR model %s (%s) on %s at %d Hz", model, type(self.model).__name__, device, self.sample_rate
        )

    def transcribe(self, waves: list[np.ndarray]) -> list[str]:
        """One transcript per clip, in order (one batch)."""
        if not waves:
            return []
        out = self.model.transcribe(
            audio=[np.ascontiguousarray(w, dtype=np.float32) for w in waves],
            batch_size=len(waves),
            verbose=False,
        )
        if isinstance(out, tuple):  # some RNNT versions return (best, all)
            out = out[0]
        return [h.text if hasattr(h, "text") else str(h) for h in out]


def build_random_asr(config: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Build an EncDecCTCModel from a config with random weights and save it as .nemo.

    For tests and offline demos: it runs NeMo's real loading and transcription path; its transcripts
    are random letters, but its layers are standardized (sharflow.models.random_init) so that different
    audio gets different transcripts and tests that compare them can fail.
    """
    import torch
    from nemo.collections.asr.models import EncDecCTCModel
    from omegaconf import OmegaConf

    from sharflow.models.random_init import calibration_batch, save_random_model, standardize_layers_

    torch.manual_seed(seed)
    model = EncDecCTCModel(cfg=OmegaConf.load(config)).eval()
    audio = calibration_batch(model.cfg.sample_rate, items=8, seed=seed)
    lengths = torch.full((len(audio),), audio.shape[1])
    standardize_layers_(model, lambda: model.forward(input_signal=audio, input_signal_length=lengths))
    return save_random_model(model, out, config, "ASR model (its transcripts mean nothing)")
