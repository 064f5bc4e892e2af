"""What a cost plan was made for: its key, and what differs from it now.

A plan's figures (every rule's `mem_mb` and `runtime`, results/plan/resources.yaml) hold only for the
config, corpus and code the calibration measured. The plan records them (`plan.json`'s `key`):

- **config**: every config value, by its dotted key, but those that change no job's cost
  (NOT_COST: a dataset's training weight and tags, where the hand-off points);
- **corpus**: each dataset's inputs by their versions (size and mtime of a local file, size and ETag
  of an object: sharflow.io.storage.stamp) and its record count when the plan was made;
- **code**: sharflow's version and a digest of its source (rules, scripts and package).

A run reads the plan's figures only when the key it would make now is the plan's
(sharflow.plan.resources.PlannedResources); otherwise every rule asks for the defaults, and the run
says once what changed (`differences`). Scaling an old plan's figures to a new config is not sound
in general (another codec or shard size changes what a job holds, not only how many there are), so
sharflow does not guess: `snakemake plan` again gives figures for what will run.
"""

import hashlib
import json
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

import sharflow
from sharflow.core.atomic import read_json
from sharflow.io import storage

# config values that change no job's cost: read by the hand-off only
NOT_COST = ("datasets.*.weight", "datasets.*.tags", "training.path_prefix")
_SHOWN = 8  # differences named one by one; the rest are counted


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    """{dotted key: its value as JSON} of every leaf of `config` (a list is one value)."""
    out = {}
    for key in sorted(config, key=str):
        value, name = config[key], f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = json.dumps(value, sort_keys=True, default=str)
    return out


def cost_config(config: dict) -> dict[str, str]:
    """The config values a plan's figures depend on (flatten, less NOT_COST)."""
    free = [pattern for p in NOT_COST for pattern in (p, f"{p}.*")]  # the value, or any key below it
    return {k: v for k, v in flatten(config).items() if not any(fnmatchcase(k, p) for p in free)}


def source_digest(root: Path | None = None) -> str:
    """A digest of sharflow's own source: the package's Python files and, beside it in a checkout, the
    workflow's rules and scripts (12 hex digits)."""
    package = Path(sharflow.__file__).parent
    root = root or package.parent.parent
    files = sorted(package.rglob("*.py"))
    for folder, pattern in (("rules", "*.smk"), ("workflow_scripts", "*.py")):
        files += sorted((root / folder).glob(pattern))
    digest = hashlib.blake2b(digest_size=6)
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def code_version() -> str:
    return f"sharflow {sharflow.__version__} (source {source_digest()})"


def plan_key(config: dict, corpus: dict[str, dict], code: str | None = None) -> dict:
    """The key of a plan made now: {config, corpus, code}. `corpus`: {dataset: {version, records}}
    (corpus_version; records None where prepare has not counted them)."""
    return {"config": cost_config(config), "corpus": corpus, "code": code or code_version()}


def corpus_version(stamps: Iterable[list], records: int | None) -> dict:
    """A dataset's entry of the key: a digest of its inputs' stamps (in order) and its record count."""
    text = json.dumps(list(stamps))
    return {"version": hashlib.blake2b(text.encode(), digest_size=8).hexdigest(), "records": records}


def key_now(config: dict, inputs: dict[str, list[str]], prepare_stats: dict[str, str]) -> dict:
    """The key of a plan made now (plan_key): each dataset's `inputs` (its manifest, recordings or
    containers: paths or URLs, as prepare reads them) stamped where they are (one HEAD per object, as
    prepare's own rerun check asks), its records from prepare's stats where they are there."""
    corpus = {}
    for ds, files in sorted(inputs.items()):
        stamps = [[f, *storage.stamp(f)] if storage.exists(f) else [f, None] for f in files]
        try:
            records = read_json(prepare_stats[ds])["records_in"]
        except (KeyError, FileNotFoundError):
            records = None
        corpus[ds] = corpus_version(stamps, records)
    return plan_key(config, corpus)


def _shown(value: str | None) -> str:
    return "(none)" if value is None else (value if len(value) <= 40 else value[:37] + "...")


def differences(planned: dict | None, now: dict) -> list[str]:
    """What differs between the key a plan was made for and the key now, one line each, the config's
    keys first; [] when they are the same. A plan without a key (an older sharflow's) is one line."""
    if not planned:
        return ["the plan records no key (made by an older sharflow): what it was made for is not known"]
    lines = []
    config_then, config_now = planned.get("config", {}), now["config"]
    for key in sorted(set(config_then) | set(config_now)):
        if config_then.get(key) != config_now.get(key):
            lines.append(f"{key}: {_shown(config_then.get(key))} -> {_shown(config_now.get(key))}")
    corpus_then, corpus_now = planned.get("corpus", {}), now["corpus"]
    for ds in sorted(set(corpus_then) | set(corpus_now)):
        then, current = corpus_then.get(ds), corpus_now.get(ds)
        if then is None or current is None:
            lines.append(f"dataset {ds}: {'not in the plan' if then is None else 'no longer in the config'}")
        elif then["version"] != current["version"]:
            lines.append(f"dataset {ds}: its manifest or audio containers changed")
        elif (
            None not in (then.get("records"), current.get("records"))
            and then["records"] != current["records"]
        ):
            lines.append(f"dataset {ds}: {then['records']:,} records -> {current['records']:,}")
    if planned.get("code") != now["code"]:
        lines.append(f"code: {planned.get('code')} -> {now['code']}")
    return lines


def summarize(lines: list[str]) -> str:
    """The differences in one line: the first _SHOWN, then how many more."""
    more = len(lines) - _SHOWN
    return "; ".join(lines[:_SHOWN]) + (f"; and {more} more" if more > 0 else "")
