"""Speaker embedders behind one small interface, chosen by name in config (`context.embedder`).

A backend is a class with `sample_rate` (Hz of the waveforms it takes), `dim`, and
`embed(waves) -> (B, dim) float32` for a list of mono float32 waveforms at that rate, in order, and
`batch_invariant`: True when a waveform's row is the same bytes whatever other waveforms share the
call. Callers embed through `embed_each`, many records a call for such a backend and one record a
call for another, so that a record's embedding depends on the record alone either way.
Adding one: a module here and a line in BACKENDS. Backends are imported only when chosen, so
that NeMo is never imported unless the `nemo` backend is used.
"""

import importlib
from pathlib import Path
from typing import Protocol

import numpy as np

from sharflow.core.logs import model_load

# The version of how sharflow computes an embedding: bump it when a backend's bytes change, so that a
# rerun embeds again what an older sharflow embedded (the quality and identity keys hold it).
EMBEDDING_VERSION = 2  # 2: ge2e in fixed-shape batches of partials

BACKENDS = {
    "ge2e": "sharflow.models.speaker_embedders.ge2e:GE2EEmbedder",
    "nemo": "sharflow.models.speaker_embedders.nemo:NemoSpeakerEmbedder",
}


class SpeakerEmbedder(Protocol):
    sample_rate: int
    dim: int
    batch_invariant: bool

    def embed(self, waves: list[np.ndarray]) -> np.ndarray: ...


def embed_each(embedder: SpeakerEmbedder, waves: list[np.ndarray]) -> np.ndarray:
    """(len(waves), dim) embeddings, each the bytes of its waveform alone: one call for a batch-invariant
    backend, else one call a waveform."""
    if not waves:
        return np.zeros((0, embedder.dim), np.float32)
    if embedder.batch_invariant:
        return embedder.embed(waves)
    return np.concatenate([embedder.embed([wave]) for wave in waves])


NEMO_DEFAULT_MODEL = "titanet_large"  # NeMo's speaker model when embedder_options names none


def embedder_label(name: str, options: dict | None = None) -> str:
    """What measured a similarity, as each cut records it (`context_speaker_embedder`) and the card
    says: the backend, and for nemo its model's name (a file's name without `.nemo`): `ge2e`,
    `nemo:titanet_large`. Similarities of different labels are on different scales (docs: context)."""
    if name != "nemo":
        return name
    model = str((options or {}).get("model") or NEMO_DEFAULT_MODEL)
    return f"nemo:{Path(model).name.removesuffix('.nemo')}"


def load_embedder(name: str, device: str = "cpu", **options) -> SpeakerEmbedder:
    """Build the backend `name` on `device` with its options from config."""
    if name not in BACKENDS:
        raise ValueError(f"unknown speaker embedder {name!r}; choose one of {sorted(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    with model_load(f"speaker_embedder:{name}"):
        return getattr(importlib.import_module(module), cls)(device=device, **options)
