"""What identifies an utterance besides its sound: its span and, for a speaker, its text.

- The **span key** (sharflow.io.audio.span_key): the audio file's name and size, offset and
  duration. The same span in two datasets is the same audio, whatever the folders.
- The **utterance key**: a speaker's id and the text, folded (Unicode NFKC, case folded, only
  letters and digits, single spaces). The same speaker reading the same text twice (a
  re-recording, a re-segmentation) is one utterance. A text shorter than `MIN_TEXT_CHARS` letters
  and digits or `MIN_TEXT_WORDS` words has no key ("Yes." is said by everyone, many times), and
  the key holds the speaker, so two speakers reading one sentence never share it.
"""

import hashlib
import re
import unicodedata

MIN_TEXT_CHARS = 20
MIN_TEXT_WORDS = 4
_NOT_WORD = re.compile(r"[\W_]+")


def folded_text(text: str) -> str:
    """The text as compared: NFKC, case folded, letters and digits, words split by single spaces."""
    return " ".join(_NOT_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def utterance_key(speaker: str, text: str | None) -> str | None:
    """A digest of (speaker, folded text), or None for a text too short to identify an utterance."""
    folded = folded_text(text or "")
    if len(folded.replace(" ", "")) < MIN_TEXT_CHARS or len(folded.split()) < MIN_TEXT_WORDS:
        return None
    return hashlib.blake2b(f"{speaker}\0{folded}".encode(), digest_size=12).hexdigest()
