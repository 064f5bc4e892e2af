"""NeMo ASR models for the quality stage's optional ASR check (quality.asr).

`quality.asr.model` is a NeMo ASR model name (downloaded by NeMo where there is internet) or a local
`.nemo`; any NeMo ASR model class (CTC, RNNT, hybrid, AED) loads through ASRModel and transcribes
through its own `transcribe()`. A model whose decoding is `greedy` is switched to `greedy_batch`,
the same argmax over a batch at once (NeMo's own advice). `transcribe_sorted` cuts a rank's clips
into length-sorted batches, as the codes stage does, so that clips of like length share a batch.
The transcripts are scored by sharflow.quality.text.
"""

import logging
from pathlib import Path

import numpy as np

from sharflow.core.errors import SharflowError
from sharflow.core.logs import model_load

log = logging.getLogger(__name__)


class Transcriber:
    """A NeMo ASR model on one device, transcribing lists of mono float32 clips at its sample rate."""

    def __init__(self, model: str, device: str = "cpu", random: bool = False, confidence: bool = False):
        import torch

        with model_load("import:nemo"):  # a fixed cost of the job, as the load itself
            from nemo.collections.asr.models import ASRModel

        try:
            with model_load("asr"):
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
        self.decoding = _batched_greedy(self.model)
        self.confidence = confidence and _token_confidence(self.model)
        if random:
            log.warning(
                "ASR model %s is RANDOMLY INITIALISED (random_from_config of quality.asr or segment.asr): "
                "its transcripts are random letters, and asr_text, cer, wer and segment texts mean "
                "NOTHING; for real data set the block's model",
                model,
            )
        log.info(
            "ASR model %s (%s) on %s at %d Hz, decoding %s",
            model,
            type(self.model).__name__,
            device,
            self.sample_rate,
            self.decoding,
        )

    def transcribe(self, waves: list[np.ndarray]) -> list[str]:
        """One transcript per clip, in order (one batch)."""
        return [h.text if hasattr(h, "text") else str(h) for h in self._hypotheses(waves)]

    def _hypotheses(self, waves: list[np.ndarray], **options) -> list:
        """The model's output for one batch of clips, in order (none for no clips)."""
        if not waves:
            return []
        out = self.model.transcribe(
            audio=[np.ascontiguousarray(w, dtype=np.float32) for w in waves],
            batch_size=len(waves),
            verbose=False,
            **options,
        )
        return out[0] if isinstance(out, tuple) else out  # some RNNT versions return (best, all)

    def transcribe_scored(self, waves: list[np.ndarray]) -> list[tuple[str, float]]:
        """(transcript, confidence) per clip, in order (one batch). The confidence is NeMo's own
        per-token confidence (max_prob, blanks excluded) averaged over the transcript's tokens: 0 for
        an empty transcript. Needs `confidence=True`."""
        if not self.confidence:
            raise ValueError("this transcriber was built without confidence=True")
        scored = []
        for h in self._hypotheses(waves, return_hypotheses=True):
            tokens = [float(c) for c in (h.token_confidence or [])]
            scored.append((h.text, float(np.mean(tokens)) if tokens and h.text else 0.0))
        return scored

    def transcribe_sorted(self, waves: list[np.ndarray], batch_seconds: float, scored: bool = False) -> list:
        """One transcript per clip (with `scored`, a (transcript, confidence) pair: transcribe_scored),
        in order, from batches of clips sorted by length, each batch holding about `batch_seconds` of
        audio (at least one clip)."""
        run = self.transcribe_scored if scored else self.transcribe
        order = sorted(range(len(waves)), key=lambda i: (len(waves[i]), i))
        out: list = [None] * len(waves)
        batch: list[int] = []
        for position, i in enumerate(order):
            batch.append(i)
            full = sum(len(waves[j]) for j in batch) >= batch_seconds * self.sample_rate
            if full or position == len(order) - 1:
                for j, value in zip(batch, run([waves[j] for j in batch]), strict=True):
                    out[j] = value
                batch = []
        return out


def _batched_greedy(model) -> str:
    """Switch a model decoding with `greedy` to `greedy_batch`; the strategy it decodes with."""
    import inspect

    from omegaconf import open_dict

    decoding = model.cfg.get("decoding")
    if decoding is None or "strategy" not in decoding:
        return "its own"
    change = getattr(model, "change_decoding_strategy", None)
    if decoding.strategy == "greedy" and change is not None:
        decoding = decoding.copy()
        with open_dict(decoding):
            decoding.strategy = "greedy_batch"
        quiet = {"verbose": False} if "verbose" in inspect.signature(change).parameters else {}
        change(decoding, **quiet)
    return str(model.cfg.decoding.strategy)


def _token_confidence(model) -> bool:
    """Have the model keep NeMo's per-token confidence (max_prob over the vocabulary, blanks
    excluded) in its hypotheses; whether it can."""
    from omegaconf import open_dict

    decoding = model.cfg.get("decoding")
    change = getattr(model, "change_decoding_strategy", None)
    if decoding is None or change is None:
        return False
    decoding = decoding.copy()
    with open_dict(decoding):
        decoding.confidence_cfg = {
            "preserve_token_confidence": True,
            "exclude_blank": True,
            "aggregation": "mean",
            "method_cfg": {"name": "max_prob"},
        }
    change(decoding, verbose=False)
    return True


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
