"""Workflow config: loaded safely, checked against the JSON schema, defaults filled in."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from sharflow.core.errors import SharflowError
from sharflow.core.metrics import FILTERABLE
from sharflow.core.splits import SplitRules


def _with_defaults(validator_class):
    """A validator class that also writes each property's `default` into the instance."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft202012Validator)
SCHEMA = Path(__file__).resolve().parents[3] / "config" / "schema.yaml"  # the repository's schema


def load_yaml(path: str | Path) -> Any:
    """Load a YAML file with the safe loader; a syntax error names the file and line."""
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise SharflowError(f"{path}: not valid YAML: {e}") from None


def load_schema(schema_path: str | Path) -> dict:
    """The config schema, with the metric names quality.filters accepts filled in from the registry
    (sharflow.core.metrics), so that they are written in one place."""
    schema = load_yaml(schema_path)
    schema["$defs"]["metric"]["enum"] = list(FILTERABLE)
    return schema


def validate_config(config: dict, schema_path: str | Path) -> dict:
    """Validate `config` in place against the schema and fill defaults; return it.

    Raises SharflowError naming the offending key (dotted path), the problem, and the key's
    description from the schema, so the user knows what to change.
    """
    schema = load_schema(schema_path)
    errors = sorted(_Validator(schema).iter_errors(config), key=lambda e: list(e.absolute_path))
    messages = [_describe(e, schema) for e in errors] or _cross_checks(config)
    if messages:
        raise SharflowError("invalid config:\n" + "\n".join(messages))
    return config


# The lossy formats' rates: the Shar's sample_rate must be one of them
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)  # the sample rates an opus stream may have
MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)  # MPEG-1, 2 and 2.5 layer III
LOSSY_RATES = {"opus": OPUS_RATES, "mp3": MP3_RATES}


def _rate_problems(shar: dict) -> list[str]:
    rates = LOSSY_RATES.get(shar.get("audio_format"))
    if rates is None or shar.get("sample_rate") in rates:
        return []
    fmt = shar["audio_format"]
    copied = " (an MP3 source at that rate is copied through)" if fmt == "mp3" else ""
    return [
        f"  shar.sample_rate: {fmt} needs one of {', '.join(map(str, rates))} Hz (got "
        f"{shar.get('sample_rate')}); set shar.sample_rate{copied} or use audio_format flac"
    ]


def _cross_checks(config: dict) -> list[str]:
    """Rules between keys that the schema cannot express."""
    problems = _rate_problems(config.get("shar", {}))
    for name, codec in config.get("codecs", {}).items():
        if (codec.get("model") is None) == (codec.get("random_from_config") is None):
            problems.append(f"  codecs.{name}: give exactly one of model or random_from_config")
        elif codec.get("random_from_config") and codec["backend"] != "nemo":
            problems.append(f"  codecs.{name}.random_from_config: only the nemo backend builds random codecs")
    for where, block in [("splits", config.get("splits"))] + [
        (f"datasets.{name}.splits", ds.get("splits")) for name, ds in config.get("datasets", {}).items()
    ]:
        try:
            SplitRules.from_config(block or {}, where)
        except SharflowError as e:
            problems.append(f"  {e}")
    quality = config.get("quality", {})
    asr = quality.get("asr", {})
    if asr.get("model") is not None and asr.get("random_from_config") is not None:
        problems.append("  quality.asr: give model or random_from_config, not both")
    for metric in ("cer", "wer"):
        if metric in quality.get("filters", {}) and not (asr.get("model") or asr.get("random_from_config")):
            problems.append(
                f"  quality.filters.{metric}: {metric} is measured by the ASR check; set quality.asr.model "
                "(a NeMo ASR model) or remove the filter (a manifest's own cer is filtered by NeMo's max_cer)"
            )
    problems += _segment_problems(config)
    for name, ds in config.get("datasets", {}).items():
        long_form = ds.get("format") == "long_form"  # its manifest, a listing of recordings, is optional
        if not long_form and (ds.get("manifest") is None) == (ds.get("recipe") is None):
            problems.append(
                f"  datasets.{name}: give exactly one of manifest or recipe (a lhotse recipe by name)"
            )
        elif ds.get("recordings") is not None and (
            ds.get("recipe") is not None or ds.get("format") != "lhotse"
        ):
            problems.append(
                f"  datasets.{name}.recordings: only with format lhotse and a manifest of supervisions"
            )
        containers = ("webdataset", "parquet_audio")
        named = {k: v for k, v in (ds.get("fields") or {}).items() if v != k}  # other than the defaults
        if (named or ds.get("extra_fields") is not None) and ds.get("format") not in containers:
            problems.append(
                f"  datasets.{name}.fields, extra_fields: only with format webdataset or parquet_audio"
            )
        if ds.get("recipe_options") and ds.get("recipe") is None:
            problems.append(f"  datasets.{name}.recipe_options: only with a recipe")
    return problems + _training_problems(config)


def _segment_problems(config: dict) -> list[str]:
    segment, problems = config.get("segment", {}), []
    asr = segment.get("asr", {})
    if asr.get("model") is not None and asr.get("random_from_config") is not None:
        problems.append("  segment.asr: give model or random_from_config, not both")
    if segment.get("min_segment", 0) >= segment.get("max_segment", 1):
        problems.append("  segment.min_segment: must be less than segment.max_segment")
    transcribed = asr.get("model") or asr.get("random_from_config")
    for name, ds in config.get("datasets", {}).items():
        if ds.get("format") != "long_form":
            continue
        if ds.get("recipe") is not None:
            problems.append(
                f"  datasets.{name}: a long_form dataset takes audio_root and optionally manifest (a "
                "listing of its recordings), not a recipe"
            )
        if not transcribed and ds.get("require_text", True):
            problems.append(
                f"  datasets.{name}: a long_form dataset's segments are transcribed by segment.asr; set "
                "segment.asr.model (a NeMo ASR model), or require_text: false for audio-only data"
            )
    return problems


def _training_problems(config: dict) -> list[str]:
    training, problems = config.get("training", {}), []
    chosen = training.get("codec")
    if chosen is not None and chosen not in config.get("codecs", {}):
        problems.append(
            f"  training.codec: {chosen!r} is not one of the codecs "
            f"({', '.join(config.get('codecs', {})) or 'none'})"
        )
    group_by, temperature = training.get("group_by"), training.get("reweight_temperature")
    if group_by not in (None, "language"):
        untagged = [
            n for n, ds in config.get("datasets", {}).items() if group_by not in (ds.get("tags") or {})
        ]
        if untagged:
            problems.append(
                f"  training.group_by: {group_by!r} is not a tag of {', '.join(sorted(untagged))} "
                f"(set datasets.<name>.tags.{group_by}, or group by language)"
            )
    levels = 2 if group_by is not None else 1
    if isinstance(temperature, list) and len(temperature) != levels:
        problems.append(
            f"  training.reweight_temperature: {len(temperature)} values for {levels} level(s) of input_cfg "
            f"({'groups, then datasets' if levels == 2 else 'datasets; group_by adds a level of groups'}): "
            "give one a level, or one number for all"
        )
    return problems


def _describe(error: jsonschema.ValidationError, schema: dict) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    if error.validator == "additionalProperties" and error.instance is not None:
        allowed = sorted(error.schema.get("properties", {}))
        return f"  {key}: {error.message}; allowed keys: {', '.join(allowed)}"
    description = error.schema.get("description")
    hint = f" ({description})" if description else ""
    return f"  {key}: {error.message}{hint}"


def schema_keys(schema: dict, prefix: str = "") -> Iterator[tuple[str, dict]]:
    """(dotted path, schema node) of every key of the config, in the schema's order.

    Sections are walked into, not listed; a user-named entry's keys have `<name>` in their path
    (`datasets.<name>.manifest`). A key that is a section too (training.tokenizer) is listed and
    walked into.
    """
    for name, node in schema.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        entries = node.get("additionalProperties")
        named = isinstance(entries, dict) and "properties" in entries
        section = "properties" in node or named
        if not section or ("default" in node and not isinstance(node["default"], dict)):
            yield path, node
        yield from schema_keys(node, path)
        if named:
            yield from schema_keys(entries, f"{path}.<name>")
