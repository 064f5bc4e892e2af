"""Stage 1a, text: the text the model reads, where NeMo reads it.

Each record gets `lang` and `tokenizer_names` (written on the cut, where MagpieTTS looks),
`normalized_text` (NeMo's own normalizer's spoken form, or the manifest's) with its source, what the
cut's tokenizers would skip of it (a quality metric), and optionally `ipa`; bad text is rejected with
a reason. The normalizer's grammars are built once per language and package versions into a cache
outside results/ (sharflow.core.cache).
"""

from sharflow.core.exports import lazy_exports

__all__ = ["decide", "normalize_dataset", "normalizer_grammars"]
__getattr__ = lazy_exports(
    __name__, {"decide": "fields", "normalize_dataset": "job", "normalizer_grammars": "normalizer"}
)
