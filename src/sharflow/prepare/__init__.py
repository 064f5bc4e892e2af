"""Stage 1, prepare: validate and standardize a NeMo manifest (JSON lines, gzip or Parquet).

Every record ends in prepared.jsonl or in rejected/<reason>.jsonl with its reason; stats.json proves
records in = out + rejected. Audio headers are probed in parallel; paths may not leave the audio root.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["check_line", "prepare_dataset"]
__getattr__ = lazy_exports(__name__, {"prepare_dataset": "job", "check_line": "manifest"})
