"""The text stage of one dataset: prepared records in, records with the text fields NeMo reads out.

It runs in parts (text.parts), contiguous runs of lines with an equal share of the audio seconds that
run side by side (normalize_part), joined in order by one merge (merge_text): the normalizer costs
~10 ms a record, ~13 CPU-hours at 4.5 M records, which as one job would bound a run's wall time.
Within a part, records stream through in chunks; with several workers the chunks are decided in
worker processes (each loads its normalizers and tokenizers once) and consumed in input order, so
the output is byte-identical for any worker or part count (the normalizer is deterministic). Every
record is written out with its text fields (sharflow.text.fields) or rejected with its reason;
stats.json proves records in = out + rejected and counts where normalized_text came from, the
records with no normalizer or with symbols left, the tokenizers, and the symbols the tokenizers skip.
"""

import itertools
import json
import logging
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from pathlib import Path

from tqdm import tqdm

from sharflow.core.atomic import atomic_dir, atomic_file, read_json, write_json
from sharflow.core.errors import SharflowError
from sharflow.core.layout import TextPartFiles
from sharflow.core.ledger import Ledger, RejectWriter, reject_row
from sharflow.models.tokenizers import Tokenizers, cannot_build, encode
from sharflow.text.fields import REASONS, Decision, TextSettings, decide
from sharflow.text.ipa import Phonemizer
from sharflow.text.normalizer import Normalizers, normalizer_key
from sharflow.work.parallel import ordered_map, resolve_workers
from sharflow.work.parts import part_span

log = logging.getLogger(__name__)

CHUNK_LINES = 256
TOP_SYMBOLS = 40  # the most common skipped symbols the stats list


class TextTools:
    """The real tools of sharflow.text.fields.decide: NeMo's normalizer, NeMo's tokenizers, espeak-ng."""

    def __init__(self, cache_dir: str | None, tokenizer: dict | None):
        self.normalizers = Normalizers(cache_dir)
        self.tokenizers = Tokenizers(tokenizer, cache_dir)
        self.phonemizer = Phonemizer()

    def spoken(self, text: str, language: str) -> str | None:
        return self.normalizers.spoken(text, language)

    def dropped(self, text: str, names: list[str]) -> tuple[int | None, int | None, list[str]]:
        """(most symbols one tokenizer skips, fewest tokens one gives, skipped symbols) over the
        tokenizers of `names` that can be built; (None, None, []) if none can."""
        encoded = [encode(tok, text) for name in names if (tok := self.tokenizers.get(name)) is not None]
        if not encoded:
            return None, None, []
        symbols = dict.fromkeys(s for e in encoded for s in e.skipped)
        return max(len(e.skipped) for e in encoded), min(e.tokens for e in encoded), list(symbols)

    def ipa(self, text: str, language: str) -> str:
        return self.phonemizer.ipa(text, language)


_TOOLS: TextTools | None = None  # one per worker process


def _init_tools(cache_dir: str | None, tokenizer: dict | None) -> None:
    global _TOOLS
    _TOOLS = TextTools(cache_dir, tokenizer)


def decide_chunk(settings: TextSettings, lines: list[bytes]) -> list[Decision]:
    """Decide a chunk of prepared lines (in a worker process, with its tools)."""
    return [decide(json.loads(raw), settings, _TOOLS) for raw in lines]


def _chunks(path: str, offset: int, count: int, lines: int) -> Iterator[list[bytes]]:
    """The `count` lines from byte `offset` of `path`, in chunks of at most `lines`."""
    with open(path, "rb") as f:
        f.seek(offset)
        left = count
        while left and (chunk := list(itertools.islice(f, min(lines, left)))):
            left -= len(chunk)
            yield chunk


def normalize_part(
    records: str,
    *,
    part: int,
    parts: int,
    out: TextPartFiles,
    dataset: str,
    settings: TextSettings,
    tokenizer: dict | None = None,
    cache_dir: str | None = None,
    workers: int = 1,
    chunk_lines: int = CHUNK_LINES,
) -> dict:
    """Give every record of one part of `records` (a contiguous run of lines with an equal share of
    the audio seconds: sharflow.work.parts) its text fields; write the part's records, rejects and
    stats atomically, for merge_text. `tokenizer` is training.tokenizer (what the tokenizers'
    coverage is measured with), `cache_dir` the cache root (sharflow.core.cache).

    Records go to the workers in chunks of at most `chunk_lines`, no more than an even share each.
    The tools (NeMo's tokenizers, the normalizer's grammars: ~16 s of imports and building) are
    loaded once, here, and the workers forked from this process share them (ordered_map's preload):
    a job's fixed cost is the same for the cost plan's small samples as for the corpus.
    """
    workers = resolve_workers(workers)
    first, offset, count = part_span(records, part, parts)
    chunk_lines = max(1, min(chunk_lines, math.ceil(count / workers)))
    name = f"{dataset} part {part} of {parts}" if parts > 1 else dataset
    log.info("text %s: %d records, %s, with %d worker(s)", name, count, asdict(settings), workers)
    with (
        atomic_file(out.records, "w", encoding="utf-8") as kept_out,
        atomic_dir(out.rejected) as rej_dir,
        RejectWriter(rej_dir) as rejects,
        tqdm(total=count, unit="rec", desc=f"text part {part}", mininterval=5) as progress,
    ):
        tally = _TextTally(dataset, settings, rejects, tokenizer)
        chunks = ordered_map(
            partial(decide_chunk, settings),
            _chunks(records, offset, count, chunk_lines),
            workers,
            initializer=partial(_init_tools, cache_dir, tokenizer),
            preload=True,
        )
        line = first
        for chunk, decisions in chunks:
            for raw, decision in zip(chunk, decisions, strict=True):
                kept = tally.add(line, raw, decision)
                if kept is not None:
                    kept_out.write(json.dumps(kept, ensure_ascii=False) + "\n")
                line += 1
            progress.update(len(chunk))
        tally.ledger.check(count, fix="rerun with --forcerun text_part")
        summary = {
            "part": part,
            "parts": parts,
            "first_line": first,
            "records": count,
            "tally": tally.state(),
        }
        write_json(out.stats, summary)
    return summary


def merge_text(
    parts: list[TextPartFiles],
    *,
    records_stats: str,
    out_records: str,
    rejected_dir: str,
    stats: str,
    dataset: str,
    settings: TextSettings,
    tokenizer: dict | None = None,
) -> dict:
    """Join the text parts, in order, into the dataset's records, rejects and stats (atomically),
    checking that they cover the prepared records line after line: records in = what prepare kept
    = out + rejected. Returns the stats."""
    expected = read_json(records_stats)["records_out"]
    tally = _TextTally(dataset, settings, None, tokenizer)
    line = 1
    for files in parts:
        part = read_json(files.stats)
        if part["records"] and part["first_line"] != line:
            raise SharflowError(
                f"{files.stats}: text part {part['part']} starts at line {part['first_line']}, not {line}: "
                "the text parts are out of date; rerun with --forcerun text_part"
            )
        line += part["records"]
        tally.absorb(part["tally"])
    tally.ledger.check(expected, fix="rerun with --forcerun text_part")
    with atomic_file(out_records, "wb") as out:
        for files in parts:
            with open(files.records, "rb") as f:
                shutil.copyfileobj(f, out)
    with atomic_dir(rejected_dir) as rej_dir:
        for reason in sorted({p.name for files in parts for p in Path(files.rejected).glob("*.jsonl")}):
            with open(rej_dir / reason, "wb") as out:
                for files in parts:
                    if (source := Path(files.rejected) / reason).exists():
                        with open(source, "rb") as f:
                            shutil.copyfileobj(f, out)
    summary = tally.summary()
    write_json(stats, summary)
    tally.log_summary(summary)
    return summary


def normalize_dataset(
    records: str,
    *,
    records_stats: str,
    out_records: str,
    rejected_dir: str,
    stats: str,
    dataset: str,
    settings: TextSettings,
    tokenizer: dict | None = None,
    cache_dir: str | None = None,
    workers: int = 1,
    chunk_lines: int = CHUNK_LINES,
    parts: int = 1,
) -> dict:
    """The text stage of one dataset in this process: its `parts` one after another (normalize_part)
    into a temporary folder beside `out_records`, then merge_text. Returns the stats."""
    folder = Path(out_records).parent
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".text-parts.", dir=folder) as tmp:
        files = [
            TextPartFiles(f"{tmp}/{p}.jsonl", f"{tmp}/{p}.rejected", f"{tmp}/{p}.stats.json")
            for p in range(parts)
        ]
        for p, out in enumerate(files):
            normalize_part(
                records,
                part=p,
                parts=parts,
                out=out,
                dataset=dataset,
                settings=settings,
                tokenizer=tokenizer,
                cache_dir=cache_dir,
                workers=workers,
                chunk_lines=chunk_lines,
            )
        return merge_text(
            files,
            records_stats=records_stats,
            out_records=out_records,
            rejected_dir=rejected_dir,
            stats=stats,
            dataset=dataset,
            settings=settings,
            tokenizer=tokenizer,
        )


class _TextTally:
    """The text job's ledger and what its stats count besides."""

    COUNTERS = ("sources", "languages", "tokenizers", "notes", "symbols")

    def __init__(
        self, dataset: str, settings: TextSettings, rejects: RejectWriter | None, tokenizer: dict | None
    ):
        self.dataset, self.settings, self.tokenizer = dataset, settings, tokenizer
        self.ledger = Ledger("text", dataset, rejects)
        self.sources: Counter[str] = Counter()
        self.languages: Counter[str] = Counter()
        self.tokenizers: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self.symbols: Counter[str] = Counter()
        self.coverage = Counter(measured=0, unmeasured=0, records_dropping=0, symbols_dropped=0)
        self.examples: dict[str, str] = {}

    def add(self, line: int, raw: bytes, decision: Decision) -> dict | None:
        """Count one decided record; write a reject's row. The kept record, or None."""
        self.notes.update(decision.notes)
        for note in decision.notes:
            self.examples.setdefault(note.split(":")[0], f"line {line}")
        if decision.record is None:
            seconds = json.loads(raw)["duration"]
            row = reject_row(decision.reason, decision.detail, raw.decode("utf-8").rstrip("\n"), line=line)
            self.ledger.reject(decision.reason, seconds, row)
            self.examples.setdefault(decision.reason, f"line {line}: {decision.detail}")
            return None
        record = decision.record
        self.ledger.keep(record["duration"])
        self.sources[record["normalized_text_source"]] += 1
        self.languages[record["lang"]] += 1
        self.tokenizers.update(record["tokenizer_names"])
        dropped = record["tokenizer_dropped_chars"]
        self.coverage["unmeasured" if dropped is None else "measured"] += 1
        if dropped:
            self.coverage["records_dropping"] += 1
            self.coverage["symbols_dropped"] += dropped
            self.symbols.update(record["tokenizer_dropped"])
        return record

    def state(self) -> dict:
        """What a part counted, whole (absorb adds it to the merge's tally)."""
        return {
            "ledger": {
                "records_out": self.ledger.records_out,
                "rejected": dict(sorted(self.ledger.rejected.items())),
                "seconds_in": self.ledger.seconds_in,
                "seconds_out": self.ledger.seconds_out,
            },
            **{name: dict(sorted(getattr(self, name).items())) for name in self.COUNTERS},
            "coverage": dict(self.coverage),
            "examples": self.examples,
        }

    def absorb(self, state: dict) -> None:
        """Add a part's state (the parts in line order: the first part's example of a finding stays)."""
        ledger = state["ledger"]
        self.ledger.absorb(ledger["records_out"], ledger["rejected"], ledger["seconds_out"])
        self.ledger.seconds_in += ledger["seconds_in"]
        for name in self.COUNTERS:
            getattr(self, name).update(state[name])
        self.coverage.update(state["coverage"])
        for kind, example in state["examples"].items():
            self.examples.setdefault(kind, example)

    def summary(self) -> dict:
        kinds = ("no_normalizer", "normalizer_failed", "fallback_tokenizer", "symbols_left", "unmeasured")
        notes: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
        for note, n in sorted(self.notes.items()):
            kind, _, what = note.partition(":")
            if kind in notes:
                notes[kind][what] = n
        left, unmeasured = notes.pop("symbols_left"), notes.pop("unmeasured")
        return {
            "dataset": self.dataset,
            **self.ledger.counts(),
            **self.ledger.hours(),
            "policies": {
                "normalized_text": self.settings.normalized_text,
                "unnormalizable": self.settings.unnormalizable,
            },
            "normalized_text_source": dict(sorted(self.sources.items())),
            "languages": dict(sorted(self.languages.items())),
            "tokenizer_names": dict(sorted(self.tokenizers.items())),
            "symbols_left": sum(left.values()),
            "symbols_left_by_source": left,
            **notes,
            "coverage": dict(self.coverage),
            "unmeasured_tokenizers": {
                name: {"records": n, "why": cannot_build(name, self.tokenizer)}
                for name, n in unmeasured.items()
            },
            "dropped_symbols": dict(self.symbols.most_common(TOP_SYMBOLS)),
            "normalizers": {lang: normalizer_key(lang)[0] for lang in sorted(self.languages)}
            if self.settings.normalizes
            else {},
        }

    def log_summary(self, s: dict) -> None:
        log.info(
            "text %s: %d records in, %d out, %d rejected %s; normalized_text from %s",
            self.dataset,
            s["records_in"],
            s["records_out"],
            s["rejected_total"],
            s["rejected"],
            s["normalized_text_source"],
        )
        for reason, n in s["rejected"].items():
            log.info("  %-24s %7d  %s; first: %s", reason, n, REASONS[reason], self.examples[reason])
        for kind, what in (
            ("no_normalizer", "have no normalizer for their language"),
            ("normalizer_failed", "made the normalizer fail"),
            (
                "fallback_tokenizer",
                "have a language NeMo names no tokenizer for (english_phoneme written on "
                "the cut; set datasets.<name>.tokenizer_names)",
            ),
        ):
            if s[kind]:
                log.warning(
                    "text %s: records that %s, by language: %s (first: %s); unnormalizable: %s",
                    self.dataset,
                    what,
                    s[kind],
                    self.examples[kind],
                    self.settings.unnormalizable,
                )
        if s["symbols_left"]:
            log.warning(
                "text %s: %d records keep digits or symbols in their spoken form, by where it came from: "
                "%s (first: %s); datasets.<name>.unnormalizable: reject drops them",
                self.dataset,
                s["symbols_left"],
                s["symbols_left_by_source"],
                self.examples["symbols_left"],
            )
        for what in s["unmeasured_tokenizers"].values():
            log.warning(
                "text %s: what %d records lose to their tokenizers is not measured: %s",
                self.dataset,
                what["records"],
                what["why"],
            )
        if s["coverage"]["records_dropping"]:
            log.warning(
                "text %s: the tokenizers skip %d symbols of %d records (most common: %s); a quality "
                "filter tokenizer_dropped_chars: {max: 0} drops them",
                self.dataset,
                s["coverage"]["symbols_dropped"],
                s["coverage"]["records_dropping"],
                "".join(list(s["dropped_symbols"])[:10]),
            )
