"""Text tokens as MagpieTTS counts them, with the NeMo tokenizers named in `training.tokenizer`.

`training.tokenizer` is the mapping MagpieTTSLhotseDataset takes as `tokenizer_config`
({name: {_target_: <NeMo tokenizer class>, ...}}); each tokenizer is built as NeMo builds it
(sharflow.models.tokenizers). As the dataset does, a cut's text is its supervision's
`normalized_text` wherever it has the key, else `text`; its tokenizers are the cut's own
`tokenizer_names` (the cut's custom, never the supervision's), else english_phoneme; its token
count is the encoded length plus one end-of-sequence token. MagpieTTS picks one of a cut's
tokenizers at random per step, so a cut counts as the longest of them: a bucket bin must hold it
whichever is picked.
"""

import json
import logging

from sharflow.core.errors import SharflowError
from sharflow.core.shar_fields import open_cuts
from sharflow.models.tokenizers import Tokenizers, encode

log = logging.getLogger(__name__)

DEFAULT_TOKENIZER = "english_phoneme"  # what MagpieTTSLhotseDataset uses for cuts without tokenizer_names


def read_text(cut: dict) -> tuple[str, list[str]]:
    """(what the model reads, the tokenizer names it may be read with) of a cut dict, by MagpieTTS's
    rules: normalized_text wherever the supervision has the key, else text; the cut's own
    tokenizer_names, else english_phoneme."""
    sup = cut["supervisions"][0]
    custom = sup.get("custom") or {}
    text = custom["normalized_text"] if "normalized_text" in custom else sup.get("text")
    names = (cut.get("custom") or {}).get("tokenizer_names") or [DEFAULT_TOKENIZER]
    return text or "", [names] if isinstance(names, str) else list(names)


class TokenCounter:
    """Counts tokens with the tokenizers NeMo builds from `config` (training.tokenizer)."""

    def __init__(self, config: dict):
        if not config:
            raise ValueError("training.tokenizer names no tokenizer")
        self.tokenizers = Tokenizers(config)
        log.info("tokens: counted with %s", ", ".join(config))

    def count(self, text: str, tokenizer_names: list[str], where: str = "a cut") -> int:
        """Tokens of `text` with the longest-reading of `tokenizer_names`, plus the end-of-sequence
        token. SharflowError if none of them can be built (training with them would fail too)."""
        built = [tok for name in tokenizer_names if (tok := self.tokenizers.get(name)) is not None]
        if not built:
            raise SharflowError(
                f"{where} names tokenizers {tokenizer_names}, and training.tokenizer builds none of them "
                f"here ({', '.join(self.tokenizers.config)}): add them to training.tokenizer, or set "
                "datasets.<name>.tokenizer_names"
            )
        return max(encode(tok, text).tokens for tok in built) + 1

    def count_cuts(self, cuts_file: str) -> list[int]:
        """The token count of every cut of a Shar cuts file, in order."""
        counts = []
        with open_cuts(cuts_file) as f:
            for n, line in enumerate(f, start=1):
                text, names = read_text(json.loads(line))
                counts.append(self.count(text, names, where=f"{cuts_file} line {n}"))
        return counts
