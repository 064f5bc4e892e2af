"""Speaker embedders behind one small interface, chosen by name in config (`context.embedder`).

A backend is a class with `sample_rate` (Hz of the waveforms it takes), `dim`, and
`embed(waves) -> (B, dim) float32` for a list of mono float32 waveforms at that rate, in order.
Adding one: a module here and a line in BACKENDS. Backends are imported only when chosen, so
that NeMo is never imported unless the `nemo` backend is used.
"""

import importlib
from typing import Protocol

import numpy as np

from sharflow.core.logs import model_load

BACKENDS = {
    "ge2e": "sharflow.models.speaker_embedders.ge2e:GE2EEmbedder",
    "nemo": "sharflow.models.speaker_embedders.nemo:NemoSpeakerEmbedder",
}


class SpeakerEmbedder(Protocol):
    sample_rate: int
    dim: int

    def embed(self, waves: list[np.ndarray]) -> np.ndarray: ...


def load_embedder(name: str, device: str = "cpu", **options) -> SpeakerEmbedder:
    """Build the backend `name` on `device` with its options from config."""
    if name not in BACKENDS:
        raise ValueError(f"unknown speaker embedder {name!r}; choose one of {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    with model_load(f"speaker_embedder:{name}"):
        return getattr(importlib.import_module(module), cls)(device=device, **options)
