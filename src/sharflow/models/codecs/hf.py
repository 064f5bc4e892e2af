"""Codecs from Hugging Face transformers (EnCodec, DAC), loaded from a local directory or hub name.

Neither masks a batch's padding by length; the codes stage batches items of one frame count only,
so each item is encoded exactly as alone (tests/test_codecs.py shows it for EnCodec).
"""

import logging
import math
from pathlib import Path

import torch

from sharflow.core.errors import SharflowError
from sharflow.models.codecs import autocast
from sharflow.models.random_init import calibration_batch, standardize_layers_

log = logging.getLogger(__name__)


class HFCodec:
    def __init__(self, model: str, device: str = "cpu", precision: str = "fp32"):
        from transformers import AutoConfig, DacModel, EncodecModel

        self.device = torch.device(device)
        self.precision = precision
        try:
            config = AutoConfig.from_pretrained(model)
            cls = {"encodec": EncodecModel, "dac": DacModel}[config.model_type]
            self.model = cls.from_pretrained(model).to(self.device).eval()
        except KeyError:
            raise SharflowError(
                f"codec {model!r}: model type {config.model_type!r} is not supported (encodec, dac)"
            ) from None
        except Exception as e:
            raise SharflowError(f"could not load the transformers codec {model!r}: {e}") from None
        self.kind = config.model_type
        self.sample_rate = int(config.sampling_rate)
        if self.kind == "encodec":
            self.samples_per_frame = int(math.prod(config.upsampling_ratios))
            self.bandwidth = max(config.target_bandwidths)
            frame_rate = self.sample_rate / self.samples_per_frame
            self.num_codebooks = int(1000 * self.bandwidth // (frame_rate * 10))
        else:
            self.samples_per_frame = int(config.hop_length)
            self.num_codebooks = int(config.n_codebooks)
        self.codebook_size = int(config.codebook_size)
        self.description = f"transformers {self.kind} {model}"

    @torch.inference_mode()
    def encode(self, batch: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = batch[:, None, :]
        with autocast(self.device, self.precision):
            if self.kind == "encodec":
                mask = (torch.arange(batch.shape[1], device=batch.device)[None, :] < lengths[:, None]).long()
                codes = self.model.encode(x, padding_mask=mask, bandwidth=self.bandwidth).audio_codes[0]
            else:
                codes = self.model.encode(x).audio_codes
        code_lengths = torch.div(
            lengths + self.samples_per_frame - 1, self.samples_per_frame, rounding_mode="floor"
        )
        return codes[:, : self.num_codebooks], code_lengths


def build_random_encodec(config: str | Path, out: str | Path, seed: int = 0) -> Path:
    """A transformers EnCodec with random weights from a YAML of EncodecConfig arguments, saved to `out`.

    For tests: it runs the real loading and encoding path. A fresh EncodecModel has all-zero
    codebooks (training fills them by k-means), so every frame would get code 0: here the encoder is
    standardized (sharflow.models.random_init) and each residual codebook is filled with residual vectors of
    calibration audio, as EnCodec's own k-means initialisation starts. Its codes mean nothing but
    depend on the audio.
    """
    import yaml
    from transformers import EncodecConfig, EncodecModel

    torch.manual_seed(seed)
    model = EncodecModel(EncodecConfig(**yaml.safe_load(Path(config).read_text()))).eval()
    audio = calibration_batch(model.config.sampling_rate, items=8, seed=seed)[:, None]
    standardize_layers_(model.encoder, lambda: model.encoder(audio))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        residual = model.encoder(audio).transpose(1, 2).reshape(-1, model.config.codebook_dim)
        for layer in model.quantizer.layers:
            picks = torch.randint(len(residual), (model.config.codebook_size,), generator=generator)
            layer.codebook.embed.copy_(residual[picks])
            layer.codebook.embed_avg.copy_(residual[picks])
            residual = residual - layer.codebook.decode(layer.codebook.encode(residual))
    model.save_pretrained(out)
    log.warning(
        "built a RANDOMLY INITIALISED EnCodec from %s at %s: its codes only exercise the pipeline",
        config,
        out,
    )
    return Path(out)
