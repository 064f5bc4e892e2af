"""NeMo AudioCodecModel (e.g. the low-frame-rate codecs MagpieTTS trains on) as a codec backend.

Encodes with the model's audio encoder and quantizer directly: the batch arrives padded once to a
multiple of samples_per_frame, whereas AudioCodecModel.encode() would pad it again.
"""

import logging
from pathlib import Path

import torch

from sharflow.core.errors import SharflowError
from sharflow.models.codecs import autocast, frames
from sharflow.models.random_init import calibration_batch, save_random_model, standardize_layers_

log = logging.getLogger(__name__)


class NemoCodec:
    def __init__(self, model: str, device: str = "cpu", precision: str = "fp32"):
        from nemo.collections.tts.models import AudioCodecModel

        self.device = torch.device(device)
        self.precision = precision
        try:
            if Path(model).suffix == ".nemo" or Path(model).exists():
                self.model = AudioCodecModel.restore_from(model, map_location=self.device)
            else:
                self.model = AudioCodecModel.from_pretrained(model, map_location=self.device)
        except Exception as e:
            raise SharflowError(
                f"could not load the NeMo codec {model!r}: {e}. Without internet, give a local .nemo file "
                "as the codec's model, or random_from_config for a pipeline test."
            ) from None
        self.model.eval()
        self.sample_rate = int(self.model.sample_rate)
        self.samples_per_frame = int(self.model.samples_per_frame)
        self.num_codebooks = int(self.model.num_codebooks)
        self.codebook_size = int(self.model.codebook_size)
        self.description = f"nemo AudioCodecModel {model}"

    @torch.inference_mode()
    def encode(self, batch: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        padded = torch.tensor(
            [frames(int(n), self.samples_per_frame) * self.samples_per_frame for n in lengths],
            device=batch.device,
        )
        with autocast(self.device, self.precision):
            if self.model.semantic_codec is None:
                encoded, encoded_len = self.model.audio_encoder(audio=batch, audio_len=padded)
            else:  # the semantic half has its own front end
                encoded, encoded_len = self.model.encode_audio(audio=batch, audio_len=padded)
        codes = self.model.quantize(encoded=encoded.float(), encoded_len=encoded_len)
        return codes, encoded_len


def build_random_codec(config: str | Path, out: str | Path, seed: int = 0) -> Path:
    """Build an AudioCodecModel from a config with random weights and save it as .nemo.

    For tests and offline demos: it runs NeMo's real loading and encoding path; its codes mean
    nothing, but the encoder is standardized (sharflow.models.random_init) so that they depend on the audio
    and use most levels of every codebook: tests that compare codes can fail.
    """
    from nemo.collections.tts.models import AudioCodecModel
    from omegaconf import OmegaConf

    torch.manual_seed(seed)
    model = AudioCodecModel(cfg=OmegaConf.load(config))
    audio = calibration_batch(
        model.sample_rate, items=2, seconds=0.6, seed=seed, multiple_of=model.samples_per_frame
    )
    lengths = torch.full((len(audio),), audio.shape[1])
    standardize_layers_(
        model.audio_encoder, lambda: model.audio_encoder(audio=audio, audio_len=lengths), per_channel=False
    )
    return save_random_model(model, out, config, "codec (its codes only exercise the pipeline)")
