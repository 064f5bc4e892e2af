"""sharflow: raw NeMo TTS manifests to training-ready Lhotse Shar datasets, as one Snakemake DAG."""

__version__ = "0.1.0"
