"""The explorer (sharflow.explore): its queries, thresholds and byte ranges against direct sums over
varied synthetic tables; what its server refuses, with crafted requests against a real server over the
session's demo run; and the page in the real Chromium, driven by Playwright.
"""

import http.client
import json
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from sharflow.core.layout import DatasetFiles
from sharflow.explore.query import ORDER, QueryError, add_order, page, where
from sharflow.explore.roots import OutsideRoots
from sharflow.explore.run import Run, cut_ids
from sharflow.explore.server import _ranged, serve
from sharflow.explore.thresholds import threshold, thresholdable
from sharflow.io.audio import PathEscapeError
from sharflow.shar.plan import cut_id
from testkit import read_jsonl


def synthetic(n: int = 400, seed: int = 0) -> pa.Table:
    """Varied rows: scores with ties and nulls, durations, speakers, splits, statuses."""
    rng = np.random.default_rng(seed)
    bak = np.round(rng.uniform(1, 5, n), 1).astype(np.float32)  # one decimal: many ties
    bak[rng.random(n) < 0.1] = np.nan
    table = pa.table(
        {
            "cut_id": [f"c{i:04d}" for i in range(n)],
            "speaker": pa.array([f"s{i % 7}" for i in range(n)]).dictionary_encode(),
            "split": pa.array(rng.choice(["train", "dev_seen", "test_unseen"], n)).dictionary_encode(),
            "duration": rng.uniform(0.5, 20, n),
            "dnsmos_bak": pa.array(bak, mask=np.isnan(bak)),
            "speaking_rate": pa.array(rng.uniform(5, 30, n).astype(np.float32)),
            "status": rng.choice(["kept", "quality_dnsmos_bak"], n, p=[0.8, 0.2]),
            "asr_text": pa.array([None if i % 3 else f"words {i}" for i in range(n)], pa.string()),
        }
    )
    return add_order(table)


def frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas()


def test_a_filter_keeps_what_a_direct_comparison_keeps():
    table = synthetic()
    df = frame(table)
    assert 0 < (df.dnsmos_bak < 3.0).sum() < len(df)  # the data can tell a right filter from a wrong one
    cases = {
        "dnsmos_bak < 3.0": df.dnsmos_bak < 3.0,
        "dnsmos_bak >= 3 and split = train": (df.dnsmos_bak >= 3) & (df.split == "train"),
        "speaker != s3 & duration <= 5.5": (df.speaker != "s3") & (df.duration <= 5.5),
        "asr_text = null": df.asr_text.isna(),
        "asr_text != null": df.asr_text.notna(),
        "asr_text ~ 'WORDS 1'": df.asr_text.fillna("").str.contains("words 1"),
        'status = "quality_dnsmos_bak"': df.status == "quality_dnsmos_bak",
        "": pd.Series(True, index=df.index),
    }
    for text, expected in cases.items():
        found = page(table, where(text, table.schema), size=10_000)
        assert [r["cut_id"] for r in found.rows] == df.cut_id[expected].tolist(), text
        assert found.total == int(expected.sum())
        assert found.hours == pytest.approx(df.duration[expected].sum() / 3600)


@pytest.mark.parametrize(
    "text, says",
    [
        ("dnsmos < 3", "no column 'dnsmos'"),
        ("dnsmos_bak < high", "holds numbers"),
        ("duration ~ 3", "asks for text"),
        ("__import__('os').system('true')", "cannot read"),
        ("dnsmos_bak < 3 or split = train", "cannot read"),
        ("dnsmos_bak > null", "only = null"),
        (f"{ORDER} = 1", "no column"),
    ],
)
def test_a_filter_is_read_never_run_and_a_mistake_says_what_to_write(text, says):
    table = synthetic(20)
    with pytest.raises(QueryError, match=says.replace("(", r"\(")):
        where(text, table.schema)


def test_a_sorted_page_is_the_same_slice_of_a_stable_sort_with_nulls_last():
    table = synthetic()
    df = frame(table)
    sorts = [("dnsmos_bak", False), ("dnsmos_bak", True), ("speaker", False), ("duration", True)]
    for column, descending in sorts:
        key = df[column].astype(str) if column == "speaker" else df[column]
        order = key.sort_values(ascending=not descending, kind="stable", na_position="last").index
        for number in (0, 3, 7):
            found = page(table, None, sort=column, descending=descending, number=number, size=50)
            expected = df.cut_id[order].tolist()[number * 50 : (number + 1) * 50]
            assert [r["cut_id"] for r in found.rows] == expected
    with pytest.raises(QueryError, match="cannot sort"):
        page(table, None, sort="nothing")


def test_a_float32_value_is_shown_as_its_shortest_decimal():
    rows = page(synthetic(30), None, size=30).rows
    shown = [r["dnsmos_bak"] for r in rows if r["dnsmos_bak"] is not None]
    assert shown and all(v == round(v, 1) for v in shown)  # 3.2, not 3.200000047683716


@pytest.mark.parametrize("side", ["min", "max"])
def test_a_threshold_keeps_the_hours_the_filter_would_keep_and_names_the_nearest_cuts(side):
    table = synthetic()
    df = frame(table)
    for value in (2.0, 3.05, 4.4):
        found = threshold(table, "dnsmos_bak", value, side)
        measured = df.dnsmos_bak.notna()
        bound = np.float32(value)  # the catalog's float32 scores, compared in their own precision
        passes = (df.dnsmos_bak >= bound) if side == "min" else (df.dnsmos_bak <= bound)
        assert found.hours_kept == pytest.approx(df.duration[measured & passes].sum() / 3600)
        dropped = df.duration[measured & ~passes].sum() / 3600 + found.hours_null
        assert found.hours_dropped == pytest.approx(dropped)
        assert found.hours_null == pytest.approx(df.duration[~measured].sum() / 3600) and found.hours_null > 0
        assert sum(found.hours) == pytest.approx(df.duration[measured].sum() / 3600)
        below = df[measured & (df.dnsmos_bak < bound)]
        nearest = below.assign(d=(below.dnsmos_bak - bound).abs()).sort_values(["d", ORDER], kind="stable")
        assert found.below == nearest[ORDER].tolist()[:5]
        assert all(df.dnsmos_bak[found.above] >= bound) and len(found.above) == 5
        assert found.config_line.endswith(f"dnsmos_bak: {{{side}: {value:g}}}")
    assert threshold(table, "speaking_rate").side == "min"  # the registry's usual side first
    with pytest.raises(ValueError, match="side is min or max"):
        threshold(table, "dnsmos_bak", 3.0, "both")


@pytest.mark.parametrize("embedder", ["ge2e", "nemo:titanet_large", None])
def test_the_context_similarity_shows_what_nemos_sampler_would_drop_at_its_documented_0_6(embedder):
    table = synthetic()
    rng = np.random.default_rng(1)
    sims = np.round(rng.uniform(0.3, 0.95, table.num_rows), 2).astype(np.float32)
    sims[rng.random(table.num_rows) < 0.1] = np.nan  # a cut without a context: NeMo's filter passes it
    table = table.append_column("context_similarity", pa.array(sims, mask=np.isnan(sims)))
    table = table.append_column("context_embedder", pa.array([embedder] * table.num_rows, pa.string()))
    df = frame(table)
    shar = df[df.status == "kept"]  # the quality filter's dropped records are not in the Shar NeMo reads
    assert 0 < (shar.context_similarity < 0.6).sum() < len(shar) and len(shar) < len(df)
    assert thresholdable(table)[-1] == "context_similarity"
    for value in (None, 0.45, 0.8):
        found = threshold(table, "context_similarity", value)
        bound = np.float32(0.6 if value is None else value)
        below = shar.context_similarity < bound  # NaN compares False: kept, as NeMo keeps it
        assert found.value == (0.6 if value is None else value) and found.side == "min"
        assert found.cuts_dropped == below.sum() and found.cuts_kept == len(shar) - below.sum()
        assert found.hours_dropped == pytest.approx(shar.duration[below].sum() / 3600)
        assert found.hours_kept == pytest.approx(shar.duration[~below].sum() / 3600)
        assert found.hours_null == pytest.approx(shar.duration[shar.context_similarity.isna()].sum() / 3600)
        assert all(df.loc[found.below, "status"] == "kept") and len(found.below) == 5
        assert found.config_line.endswith(f"min_context_speaker_similarity: {bound:g}")
        titanet = embedder == "nemo:titanet_large"
        assert ("not TitaNet" in found.scale) != titanet and (embedder or "do not name") in found.scale
    with pytest.raises(ValueError, match="one side, min"):
        threshold(table, "context_similarity", 0.6, "max")
    found = threshold(table, "dnsmos_bak", 3.0)  # every metric counts its cuts as well as its hours
    measured = df.dnsmos_bak >= np.float32(3.0)
    assert (found.cuts_kept, found.cuts_dropped) == (measured.sum(), (~measured).sum())
    assert found.scale is None and found.sides == ("min", "max")


def test_the_dropped_records_are_named_as_the_shar_names_its_cuts():
    records = [
        ("a/b/c.flac", 0.0, 2.5),
        ("c.d/e", 1.000005, 3.0),  # no extension; a dot in a folder
        ("x.y.wav", 0.123455, 0.000015),  # half a unit: rounded half to even, as round() does
        ("EN-B000000.tar#EN_B00000_S00000_W000000.mp3", 0.0, 7.1),
        ("sub/train.parquet#123", 2.0, 1.0),
        ("odd.tar#b#c.flac", 0.0, 1.0),  # not a member: the container would be odd.tar#b
        ("dir/name.", None, 4.25),
    ]
    paths, offsets, durations = (pa.chunked_array([list(c)]) for c in zip(*records, strict=True))
    found = cut_ids(paths, offsets, durations).to_pylist()
    expected = [cut_id({"audio_filepath": p, "offset": o or 0.0, "duration": d}) for p, o, d in records]
    assert found == expected and len(set(found)) == len(found)


def test_the_asr_diff_marks_the_words_it_missed_and_added():
    from sharflow.explore.api import _diff

    assert _diff("The birch canoe slid on the planks", "the birch canoe slipped on planks today") == [
        ["=", "The birch canoe"],
        ["-", "slid"],
        ["+", "slipped"],
        ["=", "on"],
        ["-", "the"],
        ["=", "planks"],
        ["+", "today"],
    ]
    assert _diff("some text", None) is None and _diff(None, "heard") is None


def test_a_range_request_gets_those_bytes_and_a_bad_one_the_whole_or_a_416():
    body = bytes(range(100))
    assert _ranged(body, "bytes=10-19") == (206, {"Content-Range": "bytes 10-19/100"}, body[10:20])
    assert _ranged(body, "bytes=90-")[2] == body[90:]
    assert _ranged(body, "bytes=-5")[2] == body[95:]
    assert _ranged(body, "bytes=0-999")[2] == body
    assert _ranged(body, "bytes=200-300")[0] == 416
    assert _ranged(body, None) == (200, {}, body)
    assert _ranged(body, "bytes=a-b") == (200, {}, body)


# ---- the server, over the session's demo run -------------------------------------------------------


@contextmanager
def running(work: Path, config: dict, **options):
    """A real explorer server over the run in `work`, on a free port of 127.0.0.1 (serve's `options`);
    stopped after."""
    server = serve(Run(work, config), port=0, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def get(server, path: str, headers: dict | None = None) -> tuple[int, bytes]:
    """A raw GET with the server's token: the path is sent exactly as written (no client-side
    normalisation)."""
    connection = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
    headers = {"Authorization": f"token {server.access.token}", **(headers or {})}
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_explorer_serves_the_run_and_refuses_every_path_outside_it(split_run, two_datasets):
    work, config = split_run
    other = two_datasets[0]  # another run of this session: its files must not be reachable
    with running(work, config) as server:
        assert server.server_address[0] == "127.0.0.1"
        status, body = get(server, "/api/datasets")
        assert status == 200 and {d["name"] for d in json.loads(body)} == {"demo", "degraded"}
        for path in (
            "/static/../../config.yaml",
            "/static/..%2F..%2Fconfig.yaml",
            "/static/%2e%2e/%2e%2e/etc/passwd",
            "/static//etc/passwd",
            "/etc/passwd",
            "//etc/passwd",
            "/%2Fetc%2Fpasswd",
            "/static/app.js%00.html",
            "/api/reject_rows?dataset=demo&stage=prepare&reason=../../../config",
            "/api/reject_rows?dataset=degraded&stage=quality&reason=..%2F..%2Fprepare%2Fprepared",
            f"/api/reject_rows?dataset=demo&stage=prepare&reason={other}/results/dirty/prepare/rejected/bad_type",
            "/api/reject_rows?dataset=../demo&stage=quality&reason=x",
            "/api/reject_rows?dataset=dirty&stage=prepare&reason=bad_type",  # the other run's dataset
            "/api/reject_rows?dataset=degraded&stage=../quality&reason=quality_dnsmos_bak",
            f"/api/cuts?dataset={work}/results/demo",
            f"/audio/cut?dataset=demo&id={other}/results/demo/shar/target_audio/recording.000000.tar",
            "/audio/cut?dataset=demo&id=../../../etc/passwd&kind=target",
            "/audio/cut?dataset=demo&id=x&kind=../target",
            "/audio/link?n=0&side=../../etc/passwd",
            "/picture/cut?dataset=%2Fetc&id=passwd",
        ):
            status, body = get(server, path)
            assert status == 404, (path, status, body[:200])
            assert b"root:" not in body and b"datasets:" not in body
        assert get(server, "/api/cuts?dataset=demo&page=-1")[0] == 400
        assert get(server, "/api/cuts?dataset=demo&filter=nope%20<%201")[0] == 400
        explorer = server.RequestHandlerClass.explorer
        with pytest.raises(OutsideRoots, match=str(other)):
            explorer.confine(f"{other}/results/demo/catalog.parquet")
        with pytest.raises(PathEscapeError):
            explorer.run.datasets["demo"].source("../../../../etc/passwd")
        (work / "results" / "escape.jsonl").symlink_to("/etc/passwd")
        try:
            with pytest.raises(OutsideRoots, match="escape"):
                explorer.confine(str(work / "results" / "escape.jsonl"))
        finally:
            (work / "results" / "escape.jsonl").unlink()


# ---- the page, in the real Chromium ------------------------------------------------------------------

# The explore page's screenshots go to a folder of the test's own; the docs' are made again with
# SHARFLOW_SCREENSHOTS=docs/pages/img .venv/bin/python -m pytest tests/test_explore.py -k curator
SCREENSHOTS = "SHARFLOW_SCREENSHOTS"


def dropped_below(work: Path, dataset: str, metric: str, value: float) -> set[str]:
    """Cut ids of the records the quality filter dropped with `metric` < `value`, read from the files."""
    files = DatasetFiles(str(work / "results" / dataset))
    records = read_jsonl(files.text_records)
    dropped = {r["line"] for path in Path(files.quality_rejected).glob("*.jsonl") for r in read_jsonl(path)}
    return {
        cut_id(records[m["line"] - 1])
        for m in read_jsonl(files.quality_metrics)
        if m["line"] in dropped and m[metric] is not None and m[metric] < value
    }


def snapshot(work: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime in ns) of every file under the run's folder."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in work.rglob("*") if p.is_file()}


def loaded(page, selector: str) -> float:
    """The duration of the audio element at `selector`, once the browser has read its header."""
    script = "s => { const a = document.querySelector(s); return a && a.readyState >= 1 && a.duration; }"
    return wait_for(page, script, selector)


def wait_for(page, expression: str, arg=None, seconds: float = 300.0):
    """The value of `expression` (a JavaScript expression, or a function of `arg`) once it is truthy,
    polled with page.evaluate: the page's Content-Security-Policy refuses the eval that
    wait_for_function's string predicates run on. A busy machine's slow answer is waited for; one
    that never comes fails with what the page was still waiting on (PageLog)."""
    deadline = time.monotonic() + seconds
    while not (value := page.evaluate(expression, arg)):
        if time.monotonic() >= deadline:
            log = PAGE_LOGS.get(id(page))
            raise AssertionError(
                f"not true after {seconds:.0f} s: {expression}" + (f"\n{log.summary()}" if log else "")
            )
        page.wait_for_timeout(50)
    return value


class PageLog:
    """What a page asked its server for and said, for a failed wait's message: the requests still
    open (with how long), the last ones answered or failed, the console's last lines."""

    def __init__(self, page):
        self.start, self.open, self.done, self.console = time.monotonic(), {}, [], []
        page.on("request", lambda r: self.open.__setitem__(id(r), (r, time.monotonic())))
        page.on("requestfinished", lambda r: self._closed(r, "answered"))
        page.on("requestfailed", lambda r: self._closed(r, f"failed: {r.failure}"))
        page.on("console", lambda m: self.console.append(f"{self._at()} {m.type}: {m.text}"))

    def _at(self, moment: float | None = None) -> str:
        return f"{(moment or time.monotonic()) - self.start:7.1f} s"

    def _closed(self, request, how: str) -> None:
        _, asked = self.open.pop(id(request), (request, time.monotonic()))
        took = time.monotonic() - asked
        self.done.append(f"{self._at(asked)} {request.method} {request.url} {how} in {took:.1f} s")

    def summary(self, last: int = 12) -> str:
        now = time.monotonic()
        still = [f"{self._at(t)} {r.method} {r.url} open for {now - t:.0f} s" for r, t in self.open.values()]
        parts = [("requests still open", still), ("last requests closed", self.done[-last:])]
        parts.append(("console", self.console[-last:]))
        return "\n".join(f"{title} ({len(lines)}):\n  " + "\n  ".join(lines) for title, lines in parts)


PAGE_LOGS: dict[int, PageLog] = {}  # by id(page), while the page is open


@contextmanager
def browsing(chromium: str, url: str):
    """(a page of the real Chromium open at `url`, the page's errors); closed after. Every wait is up
    to 5 minutes: a busy machine's slow answer is waited for, never failed on."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, args=["--autoplay-policy=no-user-gesture-required"]
        )
        page = None
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(300_000)
            PAGE_LOGS[id(page)] = PageLog(page)
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            try:
                yield page, errors
            except PlaywrightTimeout as e:  # Playwright's own waits: with what the page still waited on
                raise AssertionError(f"{e}\n{PAGE_LOGS[id(page)].summary()}") from e
        finally:
            PAGE_LOGS.pop(id(page), None)
            browser.close()


def test_a_wait_that_fails_names_the_requests_the_page_still_waits_on(chromium):
    """The explorer's browser test once waited 5 minutes for an answer that never showed: a wait that
    fails says which of the page's requests are still open, which were answered, and the console."""
    import http.server

    release = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/slow":
                release.wait(30)
            body = b"<script>console.log('asking'); fetch('/slow'); fetch('/quick');</script>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with browsing(chromium, f"http://127.0.0.1:{server.server_port}/") as (page, _):
            log, deadline = PAGE_LOGS[id(page)], time.monotonic() + 300
            while not (any("/quick" in line for line in log.done) and log.console):  # events come late
                assert time.monotonic() < deadline, log.summary()
                page.wait_for_timeout(50)
            with pytest.raises(AssertionError) as failed:
                wait_for(page, "document.title === 'never'", seconds=0.5)
            release.set()
    finally:
        release.set()
        server.shutdown()
        server.server_close()
    said = str(failed.value)
    assert "not true after 0 s: document.title === 'never'" in said
    assert "requests still open (" in said and "GET http://127.0.0.1:" in said and "/slow open for" in said
    assert "/quick answered in" in said and "log: asking" in said


def test_a_curator_filters_listens_moves_a_threshold_and_opens_a_reject_and_a_link(
    split_run, chromium, tmp_path
):
    """The page opened by the link the server prints (its token becomes the page's cookie). A slow
    answer on a busy machine is waited for (every wait up to 5 minutes), never failed on."""
    work, config = split_run
    shots = Path(os.environ.get(SCREENSHOTS) or tmp_path)
    noisy = dropped_below(work, "degraded", "dnsmos_bak", 3.0)
    assert noisy  # the degraded dataset's noisy copy is dropped by the shipped dnsmos_bak filter
    catalog = pd.read_parquet(work / "results" / "demo" / "catalog.parquet")
    assert catalog.dnsmos_bak.nunique() > 10  # scores vary: a wrong sum could not pass
    shots.mkdir(parents=True, exist_ok=True)
    before = snapshot(work)
    with running(work, config) as server, browsing(chromium, server.url) as (page, errors):
        page.wait_for_selector("#cuts tbody tr")

        # filter on the server: the degraded dataset's dropped noisy cut, and nothing else
        page.select_option("#dataset", "degraded")
        wait_for(page, "document.querySelector('#dataset-info').textContent.includes('dropped')")
        page.fill("#filter", "dnsmos_bak < 3.0")
        page.click("#apply")
        wait_for(page, f"document.querySelector('#page-info').dataset.total === '{len(noisy)}'")
        shown = page.eval_on_selector_all("#cuts tbody tr", "rows => rows.map(r => r.dataset.cut)")
        assert set(shown) == noisy
        statuses = page.eval_on_selector_all(
            "#cuts tbody td[data-column=status]", "cells => cells.map(c => c.textContent)"
        )
        assert statuses and all(s == "quality_dnsmos_bak" for s in statuses)

        # play a kept cut of demo: the player's duration is the cut's, to a sample
        page.select_option("#dataset", "demo")
        page.fill("#filter", "split = train")
        page.click("#apply")
        # until the table is the new query's: the degraded page's total (> 0) can still be showing
        train = catalog.cut_id[catalog.split == "train"].tolist()
        row_js = "document.querySelector('#cuts tbody tr')"
        shown_first = f"ids => {{ const r = {row_js}; return r !== null && ids.includes(r.dataset.cut); }}"
        wait_for(page, shown_first, train)
        first = page.eval_on_selector("#cuts tbody tr", "r => r.dataset.cut")
        page.click("#cuts tbody tr")
        page.wait_for_selector("#target-audio")
        row = catalog.set_index("cut_id").loc[first]
        duration = loaded(page, "#target-audio")
        assert abs(duration - row.duration) <= 1 / row.sample_rate
        page.evaluate(
            "s => { const a = document.querySelector(s); a.muted = true; a.play(); }", "#target-audio"
        )
        wait_for(page, "document.querySelector('#target-audio').currentTime > 0.05")
        wait_for(page, "document.querySelector('#cut-picture').naturalWidth > 0")
        skipped = "document.querySelector('#dropped-chars').textContent"  # its tokenizers, built now
        wait_for(page, f"{skipped} !== '…'")
        symbols = page.evaluate(skipped)  # as many as the text stage counted for the cut
        assert (symbols == "nothing") == (row.tokenizer_dropped_chars == 0), (symbols, row)
        context = loaded(page, "#context-audio")
        assert abs(context - row.context_duration) <= 1 / row.sample_rate
        page.screenshot(path=str(shots / "explore-cuts.png"))

        # move a threshold: the hours kept are the catalog's sum over the cuts at or above it
        page.click("nav button[data-tab=thresholds]")
        page.select_option("#metric", "dnsmos_bak")
        value = float(np.quantile(catalog.dnsmos_bak, 0.3))
        page.fill("#threshold-value", str(value))
        page.dispatch_event("#threshold-value", "change")
        wait_for(page, f"document.querySelector('#threshold-hours').dataset.value === '{value}'")
        kept = float(page.get_attribute("#threshold-hours", "data-kept"))
        expected = catalog.duration[catalog.dnsmos_bak >= np.float32(value)].sum() / 3600
        assert kept == pytest.approx(expected) and 0 < kept < catalog.duration.sum() / 3600
        page.wait_for_selector("#below li audio")
        page.screenshot(path=str(shots / "explore-thresholds.png"))

        # NeMo's threshold on the context similarity: at its documented 0.6 first, then the median
        sims = catalog.context_similarity.astype(np.float32)
        assert sims.nunique() > 10  # similarities vary: a wrong count could not pass
        page.select_option("#metric", "context_similarity")
        wait_for(page, "document.querySelector('#threshold-hours').dataset.metric.startsWith('context')")
        assert page.get_attribute("#threshold-hours", "data-value") == "0.6"
        assert page.is_disabled("#side") and "measured by ge2e, not TitaNet" in page.text_content(
            "#threshold-scale"
        )
        for value in (0.6, float(np.quantile(sims.dropna(), 0.5))):
            page.fill("#threshold-value", str(value))
            page.dispatch_event("#threshold-value", "change")
            wait_for(page, f"document.querySelector('#threshold-hours').dataset.value === '{value}'")
            dropped = int(page.get_attribute("#threshold-hours", "data-cuts-dropped"))
            assert dropped == (sims < np.float32(value)).sum()
        assert 0 < dropped < len(catalog)
        page.screenshot(path=str(shots / "explore-similarity.png"))

        # open a reject and hear it (read from its source), then an identity link's two clips
        page.select_option("#dataset", "degraded")
        page.click("nav button[data-tab=rejects]")
        page.click("#reasons tr[data-reason=quality_dnsmos_bak]")
        reject = loaded(page, "#reject-rows li audio")
        assert reject > 1.0
        page.screenshot(path=str(shots / "explore-rejects.png"))
        page.click("nav button[data-tab=identity]")
        durations = wait_for(
            page,
            "(() => { const a = [...document.querySelectorAll('#links li:first-child audio')];"
            " return a.length === 2 && a.every(x => x.readyState >= 1) && a.map(x => x.duration); })()",
        )
        link = read_jsonl(work / "results" / "identity" / "links.jsonl")[0]
        assert durations == pytest.approx([link["duration"], link["matched"]["duration"]], abs=1e-3)
        page.screenshot(path=str(shots / "explore-identity.png"))
        assert errors == []
    assert snapshot(work) == before  # looking changed nothing in the run's folder
