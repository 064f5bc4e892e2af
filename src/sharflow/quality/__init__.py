"""Stage 1b, quality: measure every record (the text stage's), then keep, drop or mark it by thresholds.

quality_part jobs measure (DNSMOS, Silero VAD, signal measures, the optional ASR check) on the
job's ranks (`rank`: CPU workers decode and measure the signal while the device runs the models,
batched) and cache the metrics; quality_merge joins the parts; quality_filter applies
quality.filters (cheap: a new threshold reruns only it and what follows).
"""

from sharflow.core.exports import lazy_exports

__all__ = ["filter_quality", "merge_quality", "run_quality_part"]
__getattr__ = lazy_exports(
    __name__, {"run_quality_part": "part", "merge_quality": "merge", "filter_quality": "filter"}
)
