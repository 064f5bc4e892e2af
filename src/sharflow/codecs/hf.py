"""Codecs from Hugging Face transformers (EnCodec, DAC), loaded from a local directory or hub name.

EnCodec's and DAC's convolutions see the zero padding of a batch, so an utterance's last frames can
differ between encoding alone and in a padded batch; tests/test_codecs.py measures the agreement.
"""

import math

import torch

from sharflow.codecs import autocast
from sharflow.errors import SharflowError


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
            raise SharflowError(f"codec {model!r}: model type {config.model_type!r} is not supported (encodec, dac)") from None
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
        code_lengths = torch.div(lengths + self.samples_per_frame - 1, self.samples_per_frame, rounding_mode="floor")
        return codes[:, : self.num_codebooks], code_lengths
