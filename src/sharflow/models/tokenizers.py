"""NeMo's TTS text tokenizers by name, as MagpieTTS builds them, and what they drop from a text.

`training.tokenizer` is the mapping MagpieTTS takes as its tokenizer config ({name: {_target_:
<NeMo tokenizer class>, ...}}); each named tokenizer is built alone with NeMo's own
`setup_tokenizers` (test mode, so phoneme tokenizers are deterministic), so that one that cannot be
built here (a g2p dictionary that is not installed, a tokenizer that downloads) leaves the others
usable. NeMo's tokenizers skip a character (or phoneme) they have no token for with a warning only;
`encode` reads those warnings to say what was skipped, while keeping them out of the job's log and
out of NeMo's in-memory log buffer (which never empties without a log file).

Without `training.tokenizer`, the tokenizers that can be built from what sharflow installs are built
by their MagpieTTS names, so coverage is measured by default: NeMo's char tokenizer of each language
(OFFLINE, its class defaults) and MagpieTTS's English one, `english_phoneme` (NeMo's IPATokenizer over
an IPA dictionary built from the CMU dictionary on PyPI: sharflow.models.phoneme_dict). NeMo's other
phoneme tokenizers cannot be: their G2P reads a pronunciation dictionary (`scripts/tts_dataset_files/`
in NeMo's repository) that the nemo_toolkit wheel does not ship; a cut whose tokenizers are all of
that kind is not measured, and the stage says how many and what to configure (`cannot_build`).

A phoneme tokenizer reads a word as letters at random (MagpieTTS trains with phoneme_probability
0.8); `encode` measures with phonemes always (probability 1.0), so that the measure is the same every
run. (NeMo's test mode means to do the same, but its setup_tokenizers calls the context manager
set_phone_prob without entering it, so it has no effect in nemo_toolkit 3.0.0.)
"""

import logging
import re
from contextlib import nullcontext
from dataclasses import dataclass

log = logging.getLogger(__name__)

_NEMO_LOGGER = "nemo_logger"
_CHARS = "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers"
# MagpieTTS's char tokenizer names (NeMo's LANGUAGE_TOKENIZER_MAP), each NeMo's char tokenizer class of
# its language with the class's defaults: what is measured where training.tokenizer is not set.
OFFLINE: dict[str, dict] = {
    f"{language}_chartokenizer": {"_target_": f"{_CHARS}.{cls}CharsTokenizer"}
    for language, cls in (
        ("english", "English"),
        ("german", "German"),
        ("spanish", "Spanish"),
        ("french", "French"),
        ("italian", "Italian"),
        ("vietnamese", "Vietnamese"),
        ("hindi", "Hindi"),
    )
}
# MagpieTTS's tokenizers built here from a dictionary sharflow makes (sharflow.models.phoneme_dict)
BUILT_HERE = ("english_phoneme",)
WHAT_TO_SET = (
    "set training.tokenizer to your model's tokenizer config (MagpieTTS's text_tokenizers, with the paths "
    "of its dictionaries) to measure them"
)
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
    """`text` through `tokenizer`: its token count and what it skipped (NeMo's warnings, captured); a
    phoneme tokenizer's words as phonemes wherever its dictionary knows them (not at random)."""
    logger = logging.getLogger(_NEMO_LOGGER)
    handlers, level = logger.handlers[:], logger.level
    collect = _Collect()
    logger.handlers = [collect]
    logger.setLevel(logging.WARNING)
    phonemes = tokenizer.set_phone_prob(1.0) if hasattr(tokenizer, "set_phone_prob") else nullcontext()
    try:
        with phonemes:
            ids = tokenizer.encode(text)
    finally:
        logger.handlers = handlers
        logger.setLevel(level)
    return Encoded(len(ids), tuple(collect.skipped))


def cannot_build(name: str, config: dict | None) -> str:
    """Why a tokenizer that measured nothing is not measured, and what to set (`config`:
    training.tokenizer)."""
    if config and name in config:
        return f"{name} of training.tokenizer cannot be built here (the text job's log says why)"
    if config:
        return f"{name} is not in training.tokenizer"
    if name in BUILT_HERE:
        return f"{name} cannot be built here (its dictionary, made from cmudict: the text job's log says why)"
    if "phoneme" in name:
        return (
            f"{name} is a phoneme tokenizer: NeMo's G2P reads a pronunciation dictionary that the "
            f"nemo_toolkit wheel does not ship; {WHAT_TO_SET}"
        )
    return f"sharflow knows no offline config for {name}; {WHAT_TO_SET}"


class Tokenizers:
    """The tokenizers of a MagpieTTS tokenizer config (else OFFLINE's), each built on first use; a name
    that is not in the config or cannot be built here is None, and `why[name]` says why (logged once).
    """

    def __init__(self, config: dict | None, cache_dir: str | None = None):
        self.given = dict(config) if config else None
        self.config = self.given or {**OFFLINE, **dict.fromkeys(BUILT_HERE)}
        self.cache_dir = cache_dir  # where a dictionary built here is kept (sharflow.core.cache)
        self.built: dict[str, object | None] = {}
        self.why: dict[str, str] = {}

    def get(self, name: str):
        if name not in self.built:
            self.built[name] = self._build(name)
        return self.built[name]

    def _build(self, name: str):
        if name not in self.config:
            self.why[name] = cannot_build(name, self.given)
            log.warning("tokenizer %r: what it drops is not measured: %s", name, self.why[name])
            return None
        try:
            if self.config[name] is None:  # english_phoneme, its dictionary built first (once)
                from sharflow.models.phoneme_dict import english_phoneme_config

                self.config[name] = english_phoneme_config(self.cache_dir)
            tokenizer = build_tokenizer(name, self.config)
        except Exception as e:  # a g2p file that is not here, a download with no network, ...
            self.why[name] = f"{name} cannot be built here ({type(e).__name__}: {e}); {WHAT_TO_SET}"
            log.warning("tokenizer %r: what it drops is not measured: %s", name, self.why[name])
            return None
        log.info("tokenizer %r built (%s)", name, type(tokenizer).__name__)
        return tokenizer
