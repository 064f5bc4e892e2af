"""NeMo speaker models (EncDecSpeakerLabelModel: TitaNet, ECAPA, ...) as a speaker embedder.

`model` is a pretrained name (`titanet_large`, downloaded by NeMo on machines with internet) or a
local `.nemo` path. A batch is padded once with zeros; lengths are passed, so the model masks the
padding (checked: an utterance embeds the same alone or in a padded batch).
"""

import logging
from pathlib import Path

import numpy as np
import torch

from sharflow.core.errors import SharflowError
from sharflow.models.random_init import calibration_batch, save_random_model, standardize_layers_
from sharflow.models.speaker_embedders import NEMO_DEFAULT_MODEL

log = logging.getLogger(__name__)


def _load(model: str, device: torch.device):
    from nemo.collections.asr.models import EncDecSpeakerLabelModel

    try:
        if Path(model).suffix == ".nemo" or Path(model).exists():
            return EncDecSpeakerLabelModel.restore_from(model, map_location=device)
        return EncDecSpeakerLabelModel.from_pretrained(model, map_location=device)
    except Exception as e:
        raise SharflowError(
            f"could not load the NeMo speaker model {model!r}: {e}. Without internet, set "
            "context.embedder_options.model to a local .nemo file."
        ) from None


class NemoSpeakerEmbedder:
    batch_invariant = False  # a padded batch masks its padding, but rounds otherwise than one alone

    def __init__(self, device: str = "cpu", model: str = NEMO_DEFAULT_MODEL):
        self.device = torch.device(device)
        self.model = _load(model, self.device).eval()
        self.sample_rate = int(self.model.cfg.sample_rate)
        emb_sizes = self.model.cfg.decoder.emb_sizes
        self.dim = int(emb_sizes if isinstance(emb_sizes, int) else list(emb_sizes)[-1])
        log.info(
            "nemo speaker model %s on %s: %d Hz, %d-dim embeddings",
            model,
            self.device,
            self.sample_rate,
            self.dim,
        )

    @torch.inference_mode()
    def embed(self, waves: list[np.ndarray]) -> np.ndarray:
        lengths = torch.tensor([len(w) for w in waves])
        batch = torch.zeros(len(waves), int(lengths.max()))
        for i, w in enumerate(waves):
            batch[i, : len(w)] = torch.from_numpy(w)
        _, emb = self.model.forward(
            input_signal=batch.to(self.device), input_signal_length=lengths.to(self.device)
        )
        return torch.nn.functional.normalize(emb.float(), dim=1).cpu().numpy()


def build_random_model(config: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Build an EncDecSpeakerLabelModel from a config with random weights and save it as .nemo.

    For tests and offline demos: it runs the real loading and inference path; its embeddings carry
    no speaker information, but its layers are standardized (sharflow.models.random_init) so that different
    audio gets clearly different embeddings and tests that compare them can fail.
    """
    from nemo.collections.asr.models import EncDecSpeakerLabelModel
    from omegaconf import OmegaConf

    torch.manual_seed(seed)
    model = EncDecSpeakerLabelModel(cfg=OmegaConf.load(config)).eval()
    audio = calibration_batch(model.cfg.sample_rate, items=8, seed=seed)
    lengths = torch.full((len(audio),), audio.shape[1])
    standardize_layers_(model, lambda: model.forward(input_signal=audio, input_signal_length=lengths))
    return save_random_model(
        model, out, config, "speaker model (its embeddings carry no speaker information)"
    )
