"""NeMo's TTS text tokenizers by name, as MagpieTTS builds them, and what they drop from a text.

`training.tokenizer` is the mapping MagpieTTS takes as its tokenizer config ({name: {_target_:
<NeMo tokenizer class>, ...}}); each named tokenizer is built alone with NeMo's own
`setup_tokenizers` (test mode, so phoneme tokenizers are deterministic), so that one that cannot be
built here (a g2p dictionary that is not installed, a tokenizer that downloads) leaves the others
usable. NeMo's tokenizers skip a character (or phoneme) they have no token for with a warning only;
`encode` reads those warnings to say what was skipped, while keeping them out of the job's log and
out of NeMo's in-memory log buffer (which never empties without a log file).
"""

import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

_NEMO_LOGGER = "nemo_logger"
# The messages of NeMo's tts_tokenizers for a skipped character (char tokenizers) or symbol (phoneme
# tokenizers, which may add the original text after the symbol).
_SKIPPED = re.compile(
    r"contains unknown char: \[(.+)\]\. Symbol will be skipped\.$"
    r"|contains unknown char/phoneme: \[(.+?)\]\.(?=Original text: \[|$)",
    re.DOTALL,
)


@dataclass(frozen=True)
class Encoded:
    """A text through one tokenizer: how many tokens it gives, and the symbols it skipped, in order."""

    tokens: int
    skipped: tuple[str, ...]


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.skipped: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        match = _SKIPPED.search(record.getMessage())
        if match:
            self.skipped.append(match.group(1) or match.group(2))


def build_tokenizer(name: str, config: dict):
    """The tokenizer `name` of a MagpieTTS tokenizer config, built with NeMo's setup_tokenizers."""
    from nemo.collections.tts.data.text_to_speech_dataset_lhotse import setup_tokenizers
    from omegaconf import OmegaConf

    return setup_tokenizers(OmegaConf.create({name: config[name]}), mode="test").tokenizers[name]


def encode(tokenizer, text: str) -> Encoded:
    """`text` through `tokenizer`: its token count and what it skipped (NeMo's warnings, captured)."""
    logger = logging.getLogger(_NEMO_LOGGER)
    handlers, level = logger.handlers[:], logger.level
    collect = _Collect()
    logger.handlers = [collect]
    logger.setLevel(logging.WARNING)
    try:
        ids = tokenizer.encode(text)
    finally:
        logger.handlers = handlers
        logger.setLevel(level)
    return Encoded(len(ids), tuple(collect.skipped))


class Tokenizers:
    """The tokenizers of a MagpieTTS tokenizer config, each built on first use; a name that is not in
    the config or cannot be built here is None (said once in the log, with why)."""

    def __init__(self, config: dict | None):
        self.config = dict(config or {})
        self.built: dict[str, object | None] = {}

    def get(self, name: str):
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str):
        if name not in self.config:
            log.warning(
                "tokenizer %r is not in training.tokenizer (%s): what it drops is not measured",
                name,
                ", ".join(self.config) or "empty",
            )
            return None
        try:
            tokenizer = build_tokenizer(name, self.config)
        except Exception as e:  # a g2p file that is not here, a download with no network, ...
            log.warning(
                "tokenizer %r cannot be built here (%s: %s): what it drops is not measured",
                name,
                type(e).__name__,
                e,
            )
            return None
        log.info("tokenizer %r built (%s)", name, type(tokenizer).__name__)
        return tokenizer
