"""NeMo's own text normalizer (nemo_text_processing), its grammars built once per language and versions.

The spoken form is what MagpieTTS inference feeds the model: `Normalizer(input_case="cased",
lang=...)` (deterministic, WFST post-processing on) and `.normalize(text, verbose=False)`. Building a
language's grammars takes ~30 s of CPU (English; French peaks near 2.8 GB) and loading them from
.far files 0.3-0.7 s, so they are built into sharflow's cache (sharflow.core.cache) under a key of the
language, these options and the versions of nemo_text_processing and pynini (the normalizer's own
file names hold none of those), by one job at a time; every later job only loads them.
"""

import logging
from pathlib import Path

from sharflow.core.atomic import write_json
from sharflow.core.cache import cache_key, cache_root, cached_build, package_versions

log = logging.getLogger(__name__)

KIND = "normalizers"
INPUT_CASE = "cased"  # MagpieTTS inference normalizes cased text
OPTIONS = {"input_case": INPUT_CASE, "deterministic": True, "post_process": True, "whitelist": None}
PACKAGES = ("nemo_text_processing", "pynini")


def normalizer_key(language: str) -> tuple[str, dict]:
    """(cache key, what it stands for) of a language's grammars with the installed packages."""
    describe = {"language": language, "versions": package_versions(*PACKAGES), "options": OPTIONS}
    return cache_key(language, **describe), describe


def _construct(language: str, folder: Path):
    """NeMo's Normalizer with its grammars in `folder`: loaded from the .far files there, or built
    and written there."""
    from nemo_text_processing.text_normalization.normalize import Normalizer

    return Normalizer(
        input_case=INPUT_CASE,
        lang=language,
        deterministic=OPTIONS["deterministic"],
        post_process=OPTIONS["post_process"],
        whitelist=OPTIONS["whitelist"],
        cache_dir=str(folder),
    )


def normalizer_grammars(language: str, cache_dir: str | None = None) -> Path | None:
    """The cache folder of a language's grammars, built first if missing (locked: one build at a
    time); None when nemo_text_processing has no normalizer for the language (it raises
    NotImplementedError, e.g. for nl)."""
    key, describe = normalizer_key(language)
    try:
        return cached_build(
            cache_root(cache_dir), KIND, key, lambda folder: _construct(language, folder), describe
        )
    except NotImplementedError as e:
        log.warning("text: nemo_text_processing has no normalizer for language %r (%s)", language, e)
        return None


class Normalizers:
    """The spoken form of texts, a normalizer per language loaded on first use from the cache.

    `spoken(text, language)` is None for a language without a normalizer.
    """

    def __init__(self, cache_dir: str | None = None):
        self.cache_dir = cache_dir
        self.loaded: dict[str, object | None] = {}

    def available(self, language: str) -> bool:
        return self._get(language) is not None

    def spoken(self, text: str, language: str) -> str | None:
        normalizer = self._get(language)
        return None if normalizer is None else normalizer.normalize(text, verbose=False)

    def _get(self, language: str):
        if language not in self.loaded:
            folder = normalizer_grammars(language, self.cache_dir)
            self.loaded[language] = None if folder is None else _construct(language, folder)
            if folder is not None:
                log.info("text: normalizer %s loaded from %s", language, folder)
        return self.loaded[language]


def record_normalizer(language: str, out: str, cache_dir: str | None = None) -> dict:
    """Build (or find) a language's grammars in the cache and write where they are to `out`: the
    text_normalizer job, which the text jobs of every dataset in that language wait for."""
    key, describe = normalizer_key(language)
    folder = normalizer_grammars(language, cache_dir)
    record = {
        "key": key,
        **describe,
        "available": folder is not None,
        "folder": str(folder) if folder else None,
    }
    if folder is None:
        log.warning(
            "text: no normalizer for %r: its records follow datasets.<name>.unnormalizable (pass or reject)",
            language,
        )
    write_json(out, record)
    return record
