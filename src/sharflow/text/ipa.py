"""IPA of a spoken form, for tokenizers that read it (`ipa` in the supervision: NeMo's IPA-BPE phoneme
tokenizer raises without it in training).

espeak-ng through `phonemizer`, with the espeak-ng library and its data from the `espeakng-loader`
wheel (pip only; no system package), stress marks and punctuation kept, language switches removed.
The output depends only on the text, the voice and the espeak-ng build, so it is repeatable.
"""

from sharflow.core.errors import SharflowError

# espeak-ng voices for language codes where the code alone is not one (others are used as they are).
VOICES = {"en": "en-us", "fr": "fr-fr", "zh": "cmn", "pt": "pt-br"}


def espeak_voice(language: str) -> str:
    return VOICES.get(language, language)


class Phonemizer:
    """IPA per language, an espeak-ng backend per language made on first use."""

    def __init__(self):
        self.backends: dict[str, object] = {}

    def ipa(self, text: str, language: str) -> str:
        if not text.strip():
            return ""
        return self._backend(language).phonemize([text], strip=True)[0]

    def _backend(self, language: str):
        if language not in self.backends:
            import espeakng_loader
            from phonemizer.backend import EspeakBackend
            from phonemizer.backend.espeak.wrapper import EspeakWrapper

            EspeakWrapper.set_library(espeakng_loader.get_library_path())
            EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
            voice = espeak_voice(language)
            try:
                self.backends[language] = EspeakBackend(
                    voice, preserve_punctuation=True, with_stress=True, language_switch="remove-flags"
                )
            except RuntimeError as e:
                raise SharflowError(
                    f"ipa: espeak-ng has no voice {voice!r} for language {language!r} ({e}); turn ipa off "
                    "for this dataset or give its records their own ipa field"
                ) from None
        return self.backends[language]
