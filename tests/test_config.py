"""sharflow.core.config: the schema, its defaults, and the errors a bad config gives."""

import dataclasses

import pytest
import yaml

from sharflow.codes.spec import CodecSpec
from sharflow.context.part import PartSettings
from sharflow.core.config import load_schema, load_yaml, validate_config
from sharflow.core.errors import SharflowError
from sharflow.core.metrics import FILTERABLE
from sharflow.prepare.manifest import CheckSettings
from sharflow.quality.part import AsrOptions, MeasureSettings
from sharflow.shar.audio import EncodeSettings
from testkit import REPO

SCHEMA = REPO / "config" / "schema.yaml"


def minimal():
    return {"datasets": {"d": {"manifest": "m.json", "audio_root": "a"}}}


def test_defaults_are_filled_everywhere():
    config = validate_config(minimal(), SCHEMA)
    assert config["datasets"]["d"]["language"] == "en"
    assert config["datasets"]["d"]["require_text"] is True
    assert config["prepare"] == {
        "workers": 0,
        "duration_tolerance": 0.1,
        "duration_from_file": False,
        "max_rejected_fraction": 0.5,
    }
    assert config["shar"]["shard_size"] == 4096 and config["context"]["min_similarity"] == 0.6
    assert validate_config({**minimal(), "shar": {"audio_format": "opus", "sample_rate": 24000}}, SCHEMA)
    assert validate_config({**minimal(), "shar": {"audio_format": "mp3", "sample_rate": 22050}}, SCHEMA)


def test_shipped_config_is_valid():
    validate_config(load_yaml(REPO / "config" / "config.yaml"), SCHEMA)


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda c: c["datasets"]["d"].pop("manifest"), "datasets.d"),
        (lambda c: c.update(prepare={"workers": -1}), "prepare.workers"),
        (lambda c: c.update(prepare={"duration_tolerance": "a lot"}), "prepare.duration_tolerance"),
        (lambda c: c["datasets"]["d"].update(langauge="en"), "langauge"),
        (lambda c: c.update(datasets={"bad name": {"manifest": "m", "audio_root": "a"}}), "datasets"),
        (lambda c: c.update(shar={"audio_format": "opus", "sample_rate": 22050}), "shar.sample_rate"),
        (lambda c: c.update(shar={"audio_format": "mp3"}), "shar.sample_rate"),
        (lambda c: c.update(context={"min_similarity": 2}), "context.min_similarity"),
        (lambda c: c.update(training={"codec": "nope"}), "training.codec"),
        (lambda c: c.update(training={"group_by": "domain"}), "is not a tag of d"),
        (lambda c: c.update(training={"reweight_temperature": [1.0, 0.5]}), "2 values for 1 level"),
        (lambda c: c.update(training={"group_by": "language", "reweight_temperature": [1]}), "for 2 level"),
        (lambda c: c.update(training={"reweight_temperature": -1}), "training.reweight_temperature"),
        (lambda c: c.update(codecs={"x": {"backend": "nemo"}}), "codecs.x"),
    ],
)
def test_bad_config_names_the_key(change, key):
    config = minimal()
    change(config)
    with pytest.raises(SharflowError) as e:
        validate_config(config, SCHEMA)
    assert key in str(e.value)


def test_every_schema_key_has_a_description_and_optional_keys_a_default():
    def walk(node, path):
        for name, sub in node.get("properties", {}).items():
            assert "description" in sub, f"{path}.{name} has no description"
            if name not in node.get("required", []):
                assert "default" in sub, f"{path}.{name} is optional but has no default"
            walk(sub, f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*")

    walk(yaml.safe_load(SCHEMA.read_text()), "config")


def test_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("datasets: [unclosed\n")
    with pytest.raises(SharflowError, match=r"c\.yaml"):
        load_yaml(bad)


def test_yaml_is_loaded_safely(tmp_path):
    evil = tmp_path / "c.yaml"
    evil.write_text("x: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SharflowError):
        load_yaml(evil)


def schema_defaults(path: str) -> dict:
    """{key: default} of the schema's keys at a dotted path (`*`: a user-named entry), sections left out."""
    node = load_schema(SCHEMA)
    for key in path.split("."):
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return {
        k: v["default"] for k, v in node["properties"].items() if "default" in v and "properties" not in v
    }


@pytest.mark.parametrize(
    ("settings", "path"),
    [
        (PartSettings, "context"),
        (EncodeSettings, "shar"),
        (AsrOptions, "quality.asr"),
        (MeasureSettings, "quality"),
        (CheckSettings, "datasets.*"),
        (CodecSpec, "codecs.*"),
    ],
)
def test_the_stages_settings_default_to_what_the_schema_says(settings, path):
    """A settings class used outside the workflow (tests, benchmarks, notebooks) defaults a key the
    schema has to the schema's default (or has none: the caller must give it): one default per key."""
    defaults = schema_defaults(path)
    compared = 0
    for f in dataclasses.fields(settings):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if f.name in defaults and default is not dataclasses.MISSING:
            assert default == defaults[f.name], f"{settings.__name__}.{f.name}"
            compared += 1
    assert compared, f"{settings.__name__} has no default of a key of {path}"


def test_the_metric_names_a_filter_accepts_come_from_the_registry():
    schema = load_schema(SCHEMA)
    assert schema["$defs"]["metric"]["enum"] == list(FILTERABLE)
    assert "enum" not in yaml.safe_load(SCHEMA.read_text())["$defs"]["metric"]  # not written twice
    config = minimal()
    config["quality"] = {"filters": {"dnsmos_bogus": {"min": 1}}}
    with pytest.raises(SharflowError, match=r"quality\.filters: 'dnsmos_bogus' is not one of"):
        validate_config(config, SCHEMA)
