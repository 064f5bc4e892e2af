"""The metric registry (sharflow.core.metrics) and everything derived from it agree: what the quality
stage measures, what a filter may name, the catalog's columns, the report's panels, the reject reasons.
(The schema's list: test_config; the docs' table: test_docs.)"""

import numpy as np
import pyarrow as pa
import soundfile as sf

from sharflow.core.metrics import (
    ASR_METRICS,
    CATALOG_METRICS,
    FILTERABLE,
    MEASURED,
    METRICS,
    NULL_PASSES,
    SIDES,
    TEXT_METRICS,
)
from sharflow.dataset.catalog import FRAGMENT_SCHEMA
from sharflow.quality.filter import REASONS, check_filters
from sharflow.quality.metrics import MODEL_RATE, signal_measures
from sharflow.quality.rank import Loaded, MeasureSettings, Meters
from sharflow.quality.text import ASR_FIELDS, asr_fields
from sharflow.report.plots import _quality_panels
from sharflow.report.quality_costs import MetricHistogram, QualityView
from testkit import DEMO


def test_every_metric_is_named_once_and_documented():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) == len(FILTERABLE) == 13
    assert set(MEASURED) | set(TEXT_METRICS) | set(ASR_METRICS) == set(FILTERABLE) == set(CATALOG_METRICS)
    assert set(FILTERABLE) == set(SIDES) and TEXT_METRICS == ("tokenizer_dropped_chars",)
    assert {"tokenizer_dropped_chars"} == NULL_PASSES  # a tokenizer that cannot be built here rejects nothing
    assert all(m.what for m in METRICS)
    assert all(set(m.sides) <= {"min", "max"} and m.sides for m in METRICS)


def test_the_quality_stage_measures_exactly_the_registered_metrics():
    rate = 16000
    t = np.arange(rate * 2) / rate
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * (t > 0.5)).astype(np.float32)
    speech, speech_rate = sf.read(DEMO / "audio" / "awb" / "awb_000.flac", dtype="float32")
    assert rate == speech_rate == MODEL_RATE
    meters = Meters("cpu", MeasureSettings("", dnsmos_max_windows=1))
    tone, spoken = meters.measure(
        [
            Loaded(1, "k1", {"text": "a short test"}, audio, None, signal_measures(audio, rate)),
            Loaded(2, "k2", {"text": "Four words, no more."}, speech, None, signal_measures(speech, rate)),
        ]
    )
    assert list(tone) == ["line", *MEASURED, *TEXT_METRICS, "key"] and tone["key"] == "k1"
    assert len({tone[m] for m in MEASURED}) > 5  # real measures, not one constant
    assert spoken["speech_ratio"] > 0.5 and spoken["speaking_rate"] > 0  # measured from this record's text
    asr = asr_fields({"text": "a short test"}, "a short test")
    assert tuple(asr) == ASR_FIELDS and set(ASR_METRICS) < set(asr)


def test_a_filter_may_name_every_metric_and_each_has_a_reject_reason():
    check_filters({m: {"min": 0} for m in FILTERABLE})
    assert {f"quality_{m}" for m in FILTERABLE} < set(REASONS)


def test_the_catalog_has_a_float32_column_for_every_metric():
    for name in CATALOG_METRICS:
        assert FRAGMENT_SCHEMA.field(name).type == pa.float32()


def test_the_report_draws_a_panel_per_metric_in_registry_order():
    edges = np.linspace(0, 1, 4)
    view = QualityView("d", {}, "drop", 1.0, {m: MetricHistogram(edges, np.ones(3)) for m in FILTERABLE})
    fig, panels = _quality_panels([view])
    assert [metric for _, _, metric in panels] == list(FILTERABLE)
    fig.clf()
