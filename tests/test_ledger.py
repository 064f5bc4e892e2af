"""sharflow.core.ledger: one stage's accounting (records in = out + rejected), reject rows and files,
and the totals merge jobs sum."""

import json

import pytest

from sharflow.core.errors import SharflowError
from sharflow.core.ledger import Ledger, RejectWriter, reject_row, totals


def test_a_ledger_counts_records_seconds_and_reasons(tmp_path):
    with RejectWriter(tmp_path) as rejects:
        ledger = Ledger("quality", "demo", rejects)
        ledger.keep(3.0)
        ledger.keep(1.5)
        ledger.reject("quality_dnsmos_bak", 2.0, reject_row("quality_dnsmos_bak", "low", "{}", line=3))
        ledger.reject("unreadable_audio", row=None)  # counted, no row to write
    ledger.check(4, fix="rerun")
    assert ledger.counts() == {
        "records_in": 4,
        "records_out": 2,
        "rejected_total": 2,
        "rejected": {"quality_dnsmos_bak": 1, "unreadable_audio": 1},
    }
    assert ledger.counts(out="cuts")["cuts"] == 2
    assert ledger.hours() == {"hours_in": round(6.5 / 3600, 6), "hours_out": round(4.5 / 3600, 6)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quality_dnsmos_bak.jsonl"]
    row = json.loads((tmp_path / "quality_dnsmos_bak.jsonl").read_text())
    assert row == {"line": 3, "reason": "quality_dnsmos_bak", "detail": "low", "original": "{}"}


def test_rejects_are_sorted_by_reason_in_the_stats():
    ledger = Ledger("context", "demo")
    for reason in ("zeta", "alpha", "zeta"):
        ledger.reject(reason)
    assert list(ledger.counts()["rejected"].items()) == [("alpha", 1), ("zeta", 2)]


@pytest.mark.parametrize("expected", [4, 6])
def test_a_count_that_does_not_add_up_names_the_stage_and_what_to_do(expected):
    ledger = Ledger("shar", "demo")
    ledger.absorb(3, {"unreadable_audio": 2})
    assert ledger.records_in == 5
    ledger.check(5, fix="x")  # in = out + rejected = what the stage before kept
    with pytest.raises(
        SharflowError, match=rf"^shar demo: {expected} records in but 3 kept \+ 2 rejected; rerun it$"
    ):
        ledger.check(expected, fix="rerun it")


def test_parts_absorbed_and_figures_totalled():
    ledger = Ledger("shar", "demo")
    parts = [
        {"cuts": 2, "rejected": {"a": 1}, "seconds": 1.0},
        {"cuts": 0, "rejected": {}, "seconds": 2.5},
        {"cuts": 4, "rejected": {"a": 1, "b": 3}},
    ]
    for p in parts:
        ledger.absorb(p["cuts"], p["rejected"], seconds_out=1.0)
    assert (ledger.records_in, ledger.records_out, dict(ledger.rejected)) == (11, 6, {"a": 2, "b": 3})
    assert ledger.seconds_out == 3.0
    assert totals(parts, ("cuts", "seconds")) == {"cuts": 6, "seconds": 3.5}


def test_a_reject_row_keeps_the_original_text_and_writes_a_record_as_json():
    assert reject_row("r", "d", '{"x": 1}\n', row=0) == {
        "row": 0,
        "reason": "r",
        "detail": "d",
        "original": '{"x": 1}\n',
    }
    assert reject_row("r", "d", {"t": "é"}, cut_id="c")["original"] == '{"t": "é"}'
