"""A lhotse recipe by name over a downloaded corpus folder: the first job of a `recipe:` dataset.

`datasets.<name>.recipe: ljspeech` runs lhotse's own `lhotse.recipes.prepare_ljspeech` over the
dataset's audio_root (the corpus folder as the corpus ships it) and writes its RecordingSet and
SupervisionSet, every part of the corpus in one (parts in sorted order: train-clean-100 before
train-clean-360), as the lhotse manifests that prepare then reads (sharflow.prepare.readers.lhotse). Only
the recipe's prepare function runs: never a download, never a shell. `recipe_options` are keyword
arguments of that function (dataset_parts, mic_id, ...), values from the config, not code. The
manifests are written sorted (recordings by id, supervisions by recording, start and id) and gzipped
without a time stamp, so the same corpus folder gives the same bytes whatever order the file system
lists it in.
"""

import gzip
import inspect
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sharflow.core.atomic import atomic_file, write_json
from sharflow.core.errors import SharflowError

log = logging.getLogger(__name__)

# Arguments sharflow sets itself; recipe_options may not name them.
_OWN_ARGUMENTS = ("corpus_dir", "output_dir", "num_jobs")


def recipe_function(name: str):
    """lhotse's prepare function of the recipe `name` (prepare_<name>, or the name without underscores),
    or a SharflowError naming the recipes there are."""
    import lhotse.recipes

    # lhotse spells some names without the underscore (librittsr): libritts_r finds it too
    found = [getattr(lhotse.recipes, f"prepare_{n}", None) for n in (name, name.replace("_", ""))]
    function = next((f for f in found if callable(f)), None)
    if function is None:
        known = sorted(n.removeprefix("prepare_") for n in dir(lhotse.recipes) if n.startswith("prepare_"))
        close = [k for k in known if name.lower()[:4] in k] or known[:12]
        raise SharflowError(
            f"recipe {name!r} is not one of lhotse's recipes (lhotse.recipes.prepare_<name>); "
            f"did you mean {', '.join(close)}? ({len(known)} recipes in all)"
        )
    return function


def run_recipe(
    name: str,
    corpus_dir: str,
    *,
    recordings: str,
    supervisions: str,
    stats: str,
    dataset: str,
    options: dict | None = None,
    workers: int = 1,
) -> dict:
    """Run the recipe over `corpus_dir`; write its recordings and supervisions (gzipped JSON lines,
    byte-identical for the same corpus) and stats atomically. Returns the stats."""
    function = recipe_function(name)
    corpus = Path(os.path.abspath(corpus_dir))  # lexical, as prepare resolves audio_root
    if not corpus.is_dir():
        raise SharflowError(
            f"dataset {dataset!r}: audio_root {corpus_dir!r} is not a folder; a recipe reads the corpus "
            f"folder as it ships (fix datasets.{dataset}.audio_root)"
        )
    options = _arguments(function, dict(options or {}), dataset, workers)
    log.info("recipe %s: lhotse.recipes.%s over %s (%s)", dataset, function.__name__, corpus, options)
    where = f"dataset {dataset!r}: lhotse's {function.__name__}"
    fix = "check that audio_root is the corpus folder in the recipe's layout"
    with tempfile.TemporaryDirectory(prefix="sharflow-recipe-") as scratch:
        if "output_dir" in options:
            options["output_dir"] = scratch  # a recipe that must write its own copy writes it here
        try:
            parts = list(_parts(function(corpus, **options)))
        except Exception as e:
            raise SharflowError(f"{where} failed over {corpus} ({type(e).__name__}: {e}); {fix}") from e
    if not parts:
        raise SharflowError(f"{where} found nothing in {corpus}; {fix}")
    # in a fixed order: recipes list a corpus folder in the file system's order
    counts = {
        "recordings": _write(
            recordings, (r for _, sets in parts for r in sorted(sets[0], key=_recording_key))
        ),
        "supervisions": _write(
            supervisions, (s for _, sets in parts for s in sorted(sets[1], key=_supervision_key))
        ),
    }
    names = [p for p, _ in parts]
    summary = {"dataset": dataset, "recipe": name, "corpus_dir": str(corpus), "parts": names, **counts}
    log.info(
        "recipe %s: %d recordings, %d supervisions from %d part(s): %s",
        dataset,
        counts["recordings"],
        counts["supervisions"],
        len(parts),
        ", ".join(names),
    )
    write_json(stats, summary)
    return summary


def _arguments(function, options: dict, dataset: str, workers: int) -> dict:
    """The recipe function's keyword arguments: the config's options, checked against its signature,
    and sharflow's own (num_jobs; output_dir, a scratch folder, only where the recipe requires one)."""
    parameters = inspect.signature(function).parameters
    wrong = [k for k in options if k in _OWN_ARGUMENTS or k not in parameters]
    if wrong:
        allowed = ", ".join(p for p in parameters if p not in _OWN_ARGUMENTS) or "none"
        raise SharflowError(
            f"dataset {dataset!r}: datasets.{dataset}.recipe_options names {', '.join(map(repr, wrong))}, "
            f"which lhotse's {function.__name__} does not take from a config (it takes: {allowed})"
        )
    if "num_jobs" in parameters:
        options["num_jobs"] = workers
    output_dir = parameters.get("output_dir")
    if output_dir is not None and output_dir.default is inspect.Parameter.empty:
        options["output_dir"] = None  # set to the job's scratch folder
    return options


def _parts(result, path: str = "") -> Iterator[tuple[str, tuple]]:
    """(part name, (recordings, supervisions)) for every part of a recipe's result, in sorted order.

    Recipes return {"recordings", "supervisions"} for a one-part corpus, {part: {...}} for several,
    {language: {part: {...}}} for MLS: any depth is walked."""
    from lhotse import RecordingSet, SupervisionSet

    if not isinstance(result, dict):
        return
    sets = list(result.values())
    recordings = [v for v in sets if isinstance(v, RecordingSet)]
    supervisions = [v for v in sets if isinstance(v, SupervisionSet)]
    if recordings and supervisions:
        yield path or "all", (recordings[0], supervisions[0])
        return
    for key in sorted(result, key=str):
        yield from _parts(result[key], f"{path}/{key}" if path else str(key))


def _recording_key(recording) -> str:
    return recording.id


def _supervision_key(supervision) -> tuple:
    return supervision.recording_id, supervision.start, supervision.id


def _write(path: str, items) -> int:
    """Items as lhotse's JSON lines (their to_dict), gzipped without a time stamp or name; how many."""
    n = 0
    with atomic_file(path, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as out:
        for item in items:
            out.write(json.dumps(item.to_dict(), ensure_ascii=False).encode("utf-8") + b"\n")
            n += 1
    return n
