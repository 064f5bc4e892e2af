"""Text tokens as MagpieTTS counts them, with the NeMo tokenizers named in `training.tokenizer`.

`training.tokenizer` is the mapping MagpieTTSLhotseDataset takes as `tokenizer_config`
({name: {_target_: <NeMo tokenizer class>, ...}}); it is built with NeMo's own `setup_tokenizers`
(test mode, so phoneme tokenizers are deterministic). Like the dataset, a cut's text is its
supervision's `normalized_text` when present, else `text`, and its token count is the encoded
length plus one end-of-sequence token. The tokenizer used for a cut is the first of its
`tokenizer_names` (MagpieTTS picks one at random), else `english_phoneme` (the dataset's default)
when configured, else the first configured tokenizer.
"""

import gzip
import json
import logging

log = logging.getLogger(__name__)

DEFAULT_TOKENIZER = "english_phoneme"  # what MagpieTTSLhotseDataset uses for cuts without tokenizer_names


class TokenCounter:
    """Counts tokens with the aggregated tokenizer NeMo builds from `config`."""

    def __init__(self, config: dict):
        from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
        from omegaconf import OmegaConf

        if not config:
            raise ValueError("training.tokenizer names no tokenizer")
        self.names = list(config)
        self.tokenizer = setup_tokenizers(OmegaConf.create(config), mode="test")
        self.default = DEFAULT_TOKENIZER if DEFAULT_TOKENIZER in self.names else self.names[0]
        log.info("tokens: counted with %s (default %s)", ", ".join(self.names), self.default)

    def name_for(self, names) -> str:
        if isinstance(names, str):
            names = [names]
        return names[0] if names and names[0] in self.names else self.default

    def count(self, text: str, tokenizer_names=None) -> int:
        """Tokens of `text` including the end-of-sequence token MagpieTTS appends."""
        return len(self.tokenizer.encode(text=text, tokenizer_name=self.name_for(tokenizer_names))) + 1

    def count_cuts(self, cuts_file: str) -> list[int]:
        """The token count of every cut of a Shar cuts file, in order."""
        counts = []
        with gzip.open(cuts_file, "rt", encoding="utf-8") as f:
            for line in f:
                cut = json.loads(line)
                sup = cut["supervisions"][0]
                custom = sup.get("custom") or {}
                text = custom["normalized_text"] if "normalized_text" in custom else sup.get("text") or ""
                names = (cut.get("custom") or {}).get("tokenizer_names") or custom.get("tokenizer_names")
                counts.append(self.count(text, names))
        return counts
