"""Stage 6, the dataset: its catalog, tables, bucket bins and the training hand-off.

catalog (a typed Parquet row per cut, merged from the shard jobs' fragments), tables (per speaker,
per bucket, the dataset card, with pandas), tokens (text tokens as MagpieTTS counts them), buckets
(1D and 2D bins from the catalog) and training (NeMo's input_cfg).
"""

from sharflow.core.exports import lazy_exports

__all__ = ["build_catalog", "write_buckets", "write_dataset_card", "write_input_cfg"]
__getattr__ = lazy_exports(
    __name__,
    {
        "build_catalog": "catalog",
        "write_buckets": "buckets",
        "write_dataset_card": "tables",
        "write_input_cfg": "training",
    },
)
