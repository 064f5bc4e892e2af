"""The explorer on a shared node (sharflow.explore.access, roots, lines, media, server): who it answers,
where it reads, how much work a request may cost, what its errors and headers say.

Most tests run a real server over a tiny run written here (a catalog, one source file, crafted rejects
and links, symlinks out of the roots) and send it raw requests, as an attacker or a careless user
would: a rebinding page's Host, no token, traversal by `#` and `://`, a 64 kB filter, a reject's
duration of 10^6 and -1, idle connections.
"""

import http.client
import io
import json
import os
import re
import socket
import tarfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from test_explore import running

from sharflow.core.layout import IDENTITY_LINKS, DatasetFiles
from sharflow.explore.access import Access, host_names, is_loopback
from sharflow.explore.lines import PAGE_SIZE, LineFiles, index_lines
from sharflow.explore.media import SpanError, TooLarge, span_wav
from sharflow.explore.query import MAX_FILTER, QueryError, clauses
from sharflow.explore.roots import OutsideRoots, Roots
from sharflow.explore.run import Run
from sharflow.explore.server import HEADERS, serve
from testkit import write_jsonl, write_tone

RATE = 16000

# ---- who is answered -------------------------------------------------------------------------------


def test_the_host_names_are_the_loopback_ones_with_the_port_and_what_the_user_adds():
    names = host_names("127.0.0.1", 8050, ("node7.cluster",))
    assert {"127.0.0.1:8050", "localhost:8050", "[::1]:8050", "node7.cluster:8050"} <= names
    assert not {"127.0.0.1", "127.0.0.1:8051", "attacker.example:8050", "localhost.attacker:8050"} & names
    assert "localhost" in host_names("127.0.0.1", 80)  # a browser leaves the default port out
    assert f"{socket.gethostname().lower()}:9000" in host_names("0.0.0.0", 9000)
    assert "10.1.2.3:9000" in host_names("10.1.2.3", 9000)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("node7")


def test_a_request_is_refused_for_a_foreign_host_or_without_the_token():
    access = Access("127.0.0.1", 8050, token="s3cret-token")
    ok = {"Host": "127.0.0.1:8050"}
    assert access.refusal("/", ok, {}) is None and access.refusal("/static/app.js", ok, {}) is None
    assert "own address" in access.refusal("/", {"Host": "attacker.example:8050"}, {})
    assert "own address" in access.refusal("/api/datasets", {}, {"token": "s3cret-token"})  # no Host
    for route in ("/api/datasets", "/audio/cut", "/picture/cut", "/api/dropped"):
        assert "needs its token" in access.refusal(route, ok, {})
        assert "needs its token" in access.refusal(route, ok, {"token": "s3cret-tokem"})
        assert "needs its token" in access.refusal(
            route, {**ok, "Cookie": "sharflow-explore-8051=s3cret-token"}, {}
        )
        assert access.refusal(route, ok, {"token": "s3cret-token"}) is None
        assert access.refusal(route, {**ok, "Authorization": "token s3cret-token"}, {}) is None
        assert access.refusal(route, {**ok, "Cookie": "a=b; sharflow-explore-8050=s3cret-token"}, {}) is None
    assert access.set_cookie() == "sharflow-explore-8050=s3cret-token; Path=/; HttpOnly; SameSite=Strict"
    assert len({Access("127.0.0.1", 1).token for _ in range(5)}) == 5  # made anew for every server


# ---- where it reads --------------------------------------------------------------------------------


def test_an_address_is_confined_by_what_would_be_opened(tmp_path):
    root, outside = tmp_path / "audio", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    secret = write_tone(outside / "secret.wav", 1.0)
    (root / "d#").mkdir()
    (root / "d#" / "esc.wav").symlink_to(secret)
    (root / "evil.tar").symlink_to(_tar(outside / "evil.tar", "m.wav", secret))
    own = _tar(root / "own.tar", "m.wav", secret)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results").symlink_to(tmp_path / "scratch")  # results on scratch: the run's own
    roots = Roots(
        [str(tmp_path / "run"), str(tmp_path / "run" / "results"), str(root), "s3://corpora/emilia"]
    )
    for inside in (
        f"{own}#m.wav",
        f"{root}/sub/../one.flac",
        f"{tmp_path}/run/results/demo/catalog.parquet",
        "s3://corpora/emilia/a.tar#x/1.mp3",
        "s3://corpora/emilia/b.flac",
    ):
        assert roots.confine(inside) == inside
    for escaping in (
        f"{root}/d#/esc.wav",  # `d#` is a folder, not a container: the symlink inside it is what opens
        f"{root}/evil.tar#s3://m.wav",  # a URL only where the container is one: this container is a symlink
        f"{root}/evil.tar#m.wav",
        f"{root}/../outside/secret.wav",
        str(secret),
        "s3://corpora/emilia-v2/a.flac",  # a sibling prefix
        "s3://corpora/emilia/../private/a.flac",
        "s3://other/emilia/a.flac",
        "http://127.0.0.1:9/x.flac",
    ):
        with pytest.raises(OutsideRoots):
            roots.confine(escaping)
        assert not roots.present(escaping)
    assert roots.present(f"{own}#m.wav") and not roots.present(f"{root}/missing.flac")


def _tar(path: Path, member: str, source: Path) -> Path:
    with tarfile.open(path, "w") as tar:
        tar.add(source, arcname=member)
    return path


# ---- pages by offset -------------------------------------------------------------------------------


@pytest.mark.parametrize("lines", [0, 1, PAGE_SIZE - 1, PAGE_SIZE, PAGE_SIZE + 1, 7 * PAGE_SIZE + 13])
@pytest.mark.parametrize("trailing_newline", [True, False])
def test_a_page_and_a_row_found_by_offset_are_those_of_a_read_from_the_top(
    tmp_path, monkeypatch, lines, trailing_newline
):
    rows = [{"line": i, "text": "é" * (i % 7) + "x" * (i % 11)} for i in range(lines)]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + ("\n" if trailing_newline else "")
    path = tmp_path / "rows.jsonl"
    path.write_text(text if rows else "", encoding="utf-8")
    monkeypatch.setattr("sharflow.explore.lines._CHUNK", 97)  # newlines found across many chunk edges
    files = LineFiles()
    assert files.count(str(path)) == lines
    pages = -(-lines // PAGE_SIZE)
    for number in range(pages + 2):
        expected = [
            {"n": n, **rows[n]} for n in range(number * PAGE_SIZE, min((number + 1) * PAGE_SIZE, lines))
        ]
        assert files.page(str(path), number) == expected
    for n in (0, lines // 2, lines - 1, lines, lines + 100):
        assert files.row(str(path), n) == (rows[n] if 0 <= n < lines else None)
    for first, count in (
        (0, 3),
        (PAGE_SIZE - 2, 5),
        (lines // 2, 2 * PAGE_SIZE + 1),
        (lines - 1, 4),
        (lines, 2),
    ):
        assert files.rows(str(path), first, count) == rows[first : first + count]  # across page edges
    assert index_lines(str(path), (0, 0)).starts.nbytes <= 8 * max(pages, 1)  # one offset a page


def test_a_file_that_changes_is_indexed_again(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"a": 1}])
    files = LineFiles()
    assert files.count(str(path)) == 1
    write_jsonl(path, [{"a": 1}, {"a": 2}, {"a": 3}])
    os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
    assert files.count(str(path)) == 3 and files.row(str(path), 2) == {"a": 3}


# ---- bounded work ----------------------------------------------------------------------------------


def test_a_span_is_clamped_to_its_file_and_refused_when_it_cannot_be_played(tmp_path):
    one = write_tone(tmp_path / "one.flac", 1.0, RATE)
    assert sf.info(_wav(span_wav(str(one), 0.0, 1e6, 1 << 20))).frames == RATE  # not 10^6 s of zeros
    assert sf.info(_wav(span_wav(str(one), 0.25, 5400.0, 1 << 20))).frames == RATE * 3 // 4
    for offset, duration in ((0.0, -1.0), (0.0, 0.0), (0.0, float("nan")), (0.0, float("inf")), (-1.0, 1.0)):
        with pytest.raises(SpanError, match="a span is"):
            span_wav(str(one), offset, duration, 1 << 20)
    with pytest.raises(SpanError, match="past the end"):
        span_wav(str(one), 2.0, 1.0, 1 << 20)
    with pytest.raises(TooLarge, match=r"at most 0\.5 s"):  # 16 kB hold half a second at 16 kHz
        span_wav(str(one), 0.0, 1.0, 16 << 10)


def _wav(data: bytes):
    return io.BytesIO(data)


def test_a_filter_past_its_length_is_refused_and_one_within_it_read_in_one_pass():
    with pytest.raises(QueryError, match=f"at most {MAX_FILTER} characters"):
        clauses("a" + " " * 65_536 + "b")
    spaced = "dnsmos_bak < 3" + " " * (MAX_FILTER - 40) + "and  split = train"
    assert clauses(spaced) == [("dnsmos_bak", "<", "3"), ("split", "=", "train")]
    assert clauses("a<=1&b~'x & y'  AND c != \"q and r\"") == [
        ("a", "<=", "1"),
        ("b", "~", "'x & y'"),
        ("c", "!=", '"q and r"'),
    ]
    for unreadable in ("a", "a <", "a < 1 and", "a < 1 &", "a < 1 or b < 2", "a < 'open", "(a < 1)"):
        with pytest.raises(QueryError, match="cannot read"):
            clauses(unreadable)


# ---- the server ------------------------------------------------------------------------------------


@pytest.fixture
def tiny(tmp_path):
    """A run folder with one dataset `tiny`: a catalog of 3 rows, a source file of 1 s, rejects whose
    records are crafted (a duration of 10^6, of -1, a missing file, a symlink out by `#`, a symlinked
    tar addressed with `://`, a path out of the root) and identity links to two of them."""
    run, audio, outside = tmp_path / "run", tmp_path / "audio", tmp_path / "outside"
    for folder in (run, audio, outside):
        folder.mkdir()
    write_tone(audio / "one.flac", 1.0, RATE)
    secret = write_tone(outside / "secret.wav", 2.0, RATE)
    (audio / "d#").mkdir()
    (audio / "d#" / "esc.wav").symlink_to(secret)
    (audio / "evil.tar").symlink_to(_tar(outside / "evil.tar", "s3://m.wav", secret))
    files = DatasetFiles(str(run / "results" / "tiny"))
    Path(files.catalog).parent.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "cut_id": ["one-0-100000", "two-0-100000", "three-0-100000"],
                "source_file": ["one.flac", "missing.flac", "d#/esc.wav"],
                "offset": [0.0, 0.0, 0.0],
                "duration": [1.0, 1.0, 2.0],
                "dnsmos_bak": pa.array([3.5, 2.0, 4.0], pa.float32()),
            }
        ),
        files.catalog,
    )
    records = [
        {"audio_filepath": "one.flac", "duration": 1e6},
        {"audio_filepath": "one.flac", "duration": -1},
        {"audio_filepath": "one.flac", "offset": 0.5, "duration": 5400},  # milliseconds, by mistake
        {"audio_filepath": "missing.flac", "duration": 1.0},
        {"audio_filepath": "d#/esc.wav", "duration": 2.0},
        {"audio_filepath": "evil.tar#s3://m.wav", "duration": 2.0},
        {"audio_filepath": "../outside/secret.wav", "duration": 2.0},
    ]
    rows = [
        {"line": i + 1, "reason": "crafted", "detail": "", "original": json.dumps(r)}
        for i, r in enumerate(records)
    ]
    Path(files.prepare_rejected).mkdir(parents=True)
    write_jsonl(Path(files.prepare_rejected) / "crafted.jsonl", rows)
    link = {"dataset": "tiny", "audio_filepath": "one.flac", "offset": 0.0, "duration": 1.0}
    links = [
        {**link, "matched": {**link, "audio_filepath": "d#/esc.wav"}},
        {**link, "duration": 1e6, "matched": link},
    ]
    (run / IDENTITY_LINKS).parent.mkdir(parents=True)
    write_jsonl(run / IDENTITY_LINKS, links)
    config = {"datasets": {"tiny": {"manifest": "m.json", "audio_root": str(audio)}}}
    return run, config, [str(tmp_path), str(audio), str(outside)]


def request(server, path: str, headers: dict | None = None, token: bool = True):
    """(status, headers, body) of a raw GET: the path as written, the Host a browser on 127.0.0.1 sends
    (unless `headers` names another) and, with `token`, the server's token."""
    port = server.server_address[1]
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    sent = {
        "Host": f"127.0.0.1:{port}",
        **({"Authorization": f"token {server.access.token}"} if token else {}),
    }
    try:
        connection.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for name, value in {**sent, **(headers or {})}.items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def assert_no_machine_path(body: bytes, paths: list[str]) -> None:
    text = body.decode("utf-8", "replace")
    assert not any(p in text for p in paths), text
    assert not re.search(r"(?<![\w.:/])/(tmp|etc|root|home|work|usr)/", text), text


ROUTES = [
    "/api/datasets",
    "/api/cuts?dataset=tiny",
    "/api/cut?dataset=tiny&id=one-0-100000",
    "/api/dropped?dataset=tiny&id=one-0-100000",
    "/api/threshold?dataset=tiny&metric=dnsmos_bak",
    "/api/rejects?dataset=tiny",
    "/api/reject_rows?dataset=tiny&stage=prepare&reason=crafted",
    "/api/links",
    "/audio/cut?dataset=tiny&id=one-0-100000&kind=target",
    "/audio/reject?dataset=tiny&stage=prepare&reason=crafted&n=0",
    "/audio/link?n=0&side=record",
    "/picture/cut?dataset=tiny&id=one-0-100000&kind=target",
]


def test_a_rebinding_page_and_a_request_without_the_token_are_refused(tiny):
    run, config, _ = tiny
    with running(run, config) as server:
        port = server.server_address[1]
        assert server.url.startswith(f"http://127.0.0.1:{port}/?token=") and server.access.token in server.url
        for host in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1.nip.io:{port}", "127.0.0.1"):
            for path in ("/", "/static/app.js", *ROUTES):
                status, _, body = request(server, path, {"Host": host})
                assert status == 403 and b"own address" in body, (host, path, status)
        for path in ROUTES:
            assert request(server, path, token=False)[0] == 403, path
            assert request(server, path, {"Authorization": "token wrong"}, token=False)[0] == 403
            status = request(
                server, f"{path}{'&' if '?' in path else '?'}token={server.access.token}", token=False
            )[0]
            assert status in (200, 404), (path, status)  # answered (a missing thing is its own answer)
        for host in (f"localhost:{port}", f"[::1]:{port}"):
            assert request(server, "/api/datasets", {"Host": host})[0] == 200
        # the page opened with its token sets it as a cookie; the page's own requests then carry it
        status, headers, _ = request(server, f"/?token={server.access.token}", token=False)
        cookie = headers["Set-Cookie"]
        assert status == 200 and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert request(server, "/api/datasets", {"Cookie": cookie.split(";")[0]}, token=False)[0] == 200
        assert "Set-Cookie" not in request(server, "/", token=False)[1]


def test_crafted_rejects_are_clamped_refused_or_not_found_and_no_answer_names_a_path(tiny):
    run, config, paths = tiny
    with running(run, config) as server:
        rows = json.loads(request(server, "/api/reject_rows?dataset=tiny&stage=prepare&reason=crafted")[2])[
            "rows"
        ]
        assert [r["playable"] for r in rows] == [True, True, True, False, False, False, False]
        answers = {}
        for n in range(len(rows)):
            answers[n] = request(server, f"/audio/reject?dataset=tiny&stage=prepare&reason=crafted&n={n}")
        status, _, body = answers[0]  # duration 10^6 on a file of 1 s: the file's 1 s
        assert status == 200 and sf.info(_wav(body)).frames == RATE and len(body) < 2 * RATE + 100
        assert answers[1][0] == 400 and b"duration > 0" in answers[1][2]
        assert answers[2][0] == 200 and sf.info(_wav(answers[2][2])).frames == RATE // 2
        assert answers[3][0] == 404 and b"its audio file is not there" in answers[3][2]  # was a 500
        for n in (4, 5, 6):  # a symlink out by `#`, a symlinked tar with a `://` member, a path out
            assert answers[n][0] == 404 and not answers[n][2].startswith(b"RIFF"), n
        assert [
            request(server, f"/audio/link?n={n}&side={s}")[0]
            for n, s in ((0, "record"), (0, "matched"), (1, "record"))
        ] == [200, 404, 200]
        crafted = [
            "/audio/cut?dataset=tiny&id=two-0-100000&kind=target",  # a dropped row whose file is missing
            "/audio/cut?dataset=tiny&id=three-0-100000&kind=target",  # a symlink out
            "/picture/cut?dataset=tiny&id=three-0-100000&kind=target",
            "/api/reject_rows?dataset=tiny&stage=prepare&reason=../../../etc/passwd",
            "/api/cuts?dataset=tiny&filter=" + "a" + "%20" * 20_000 + "b",
            "/api/cuts?dataset=tiny&filter=nope%20<%201",
            "/api/cuts?dataset=tiny&page=99999999999999999999",
            "/api/threshold?dataset=tiny&metric=dnsmos_bak&side=both",
            "/nothing",
        ]
        for path in crafted:
            status, _, body = request(server, path)
            assert status in (400, 404), (path, status, body[:200])
            assert json.loads(body)["error"]
        for status, _, body in [*answers.values(), *(request(server, p) for p in crafted)]:
            if status != 200:
                assert_no_machine_path(body, paths)
        assert b"at most 2000 characters" in request(server, crafted[4])[2]


def test_every_answer_says_nosniff_no_store_and_no_referrer_and_grants_no_other_origin(tiny):
    run, config, _ = tiny
    with running(run, config) as server:
        for path in (
            "/",
            "/static/app.js",
            "/api/datasets",
            "/audio/cut?dataset=tiny&id=one-0-100000",
            "/api/cut?dataset=tiny&id=x",
        ):
            for token in (True, False):
                _, headers, _ = request(server, path, {"Origin": "http://attacker.example"}, token=token)
                for name, value in HEADERS.items():
                    assert headers.get(name) == value, (path, name)
                assert (
                    headers["X-Content-Type-Options"] == "nosniff" and headers["Cache-Control"] == "no-store"
                )
                assert not any(h.lower().startswith("access-control-") for h in headers)


def _serving(server, count: int) -> None:
    """Wait until the server serves `count` connections (a finished request's thread ends after its
    answer is read)."""
    deadline = time.monotonic() + 120
    while server.connections() != count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.connections() == count


def _idle(server, count: int) -> list[socket.socket]:
    """`count` more connections that send nothing, once the server serves them all."""
    expected = server.connections() + count
    sockets = [socket.create_connection(server.server_address[:2], timeout=60) for _ in range(count)]
    _serving(server, expected)
    return sockets


def test_idle_connections_are_bounded_and_do_not_hold_up_a_page_or_server_close(tiny):
    run, config, _ = tiny
    server = serve(Run(run, config), port=0, max_connections=4)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    idle = []
    try:
        idle = _idle(server, 3)  # three connections that never send a byte
        assert request(server, "/api/datasets")[0] == 200  # the fourth place
        _serving(server, 3)
        idle += _idle(server, 1)
        with socket.create_connection(server.server_address[:2], timeout=60) as fifth:
            told = b"".join(iter(lambda: fifth.recv(4096), b""))  # told at once, before it asks
        assert told.startswith(b"HTTP/1.0 503") and b"try again" in told
    finally:
        server.shutdown()
        closing = threading.Thread(target=server.server_close)
        closing.start()
        closing.join(timeout=60)  # a hang, not a slow reply: the idle ones never speak
        assert not closing.is_alive(), "server_close waited for connections that send nothing"
        for s in idle:
            s.close()
        thread.join()
    assert server.connections() == 0


def test_a_connection_that_stays_silent_is_closed_after_the_timeout(tiny, monkeypatch):
    run, config, _ = tiny
    monkeypatch.setattr("sharflow.explore.server.Handler.timeout", 0.5)
    with running(run, config) as server:
        with socket.create_connection(server.server_address[:2], timeout=60) as s:
            assert s.recv(1) == b""  # closed by the server, having sent nothing
        assert request(server, "/api/datasets")[0] == 200
