"""The explorer's web server: a plain page and a JSON API over one run, on the standard library's
threaded HTTP server, safe to run on a node that other people share.

Every request is first checked by sharflow.explore.access: its Host must be one of the server's own
names (DNS rebinding is refused) and a route that reads the run must carry the token printed at start.
Every request names things, never files: a dataset (one of the run's), a cut id (a row of its table), a
stage and a reason (one of the reject files the stage folder holds), a line number. The file that
answers is asked of the layout and opened only through `Roots.confine` (sharflow.explore.roots). Each
request's work is bounded: a filter's length, a span's seconds (clamped to its file), an answer's bytes,
a page read by an offset index. A connection that sends nothing for TIMEOUT seconds is closed; at most
MAX_CONNECTIONS are served at once (more are told 503 at once). Errors name what was asked for, never a
path of the machine (the log keeps the detail). GET and HEAD alone; no CORS header.

Routes (all GET): / and /static/<file> (the page); /api/datasets; /api/cuts?dataset&filter&sort&desc&
page&size; /api/cut?dataset&id; /api/threshold?dataset&metric&value&side; /api/rejects?dataset;
/api/reject_rows?dataset&stage&reason&page; /api/links?page; /api/recordings?dataset&page;
/api/timeline?dataset&n; /api/try_segment?dataset&n&max_pause&min_segment&max_segment&cluster_similarity;
/audio/cut?dataset&id&kind (target or context); /audio/reject?dataset&stage&reason&n; /audio/link?n&side
(record or matched); /audio/recording?dataset&n&start&end; /picture/cut?dataset&id&kind.
"""

import contextlib
import functools
import json
import logging
import os
import socket
import threading
from collections import OrderedDict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from sharflow.core.atomic import read_json
from sharflow.explore import api
from sharflow.explore.access import Access
from sharflow.explore.api import BadRequest, NotFound
from sharflow.explore.lines import LineFiles
from sharflow.explore.query import QueryError
from sharflow.explore.recordings import Trials, settings_of_run
from sharflow.explore.roots import OutsideRoots
from sharflow.explore.run import Run
from sharflow.io.audio import PathEscapeError

log = logging.getLogger(__name__)

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}
TIMEOUT = 20.0  # seconds a connection may stay silent (reading its request) or stall (taking its answer)
MAX_CONNECTIONS = 64  # served at once; a browser opens at most 6 to one host
KEEP_JSON = 64  # JSON files kept parsed (a long_form dataset's stats, plan and recordings' results)
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'",
}
_UNSEEN = "not found: this run has no such thing"


class Explorer:
    """The run being explored and what answers each route (`answer`)."""

    def __init__(self, run: Run):
        self.run = run
        self.roots = run.roots
        self.lines = LineFiles()
        folder = resources.files("sharflow.explore") / "static"
        self.static = {
            p.name: p.read_bytes() for p in folder.iterdir() if p.name.endswith(tuple(STATIC_TYPES))
        }
        self._tables = threading.Lock()
        self._warm = False
        self._tokenizing = threading.Lock()  # its own: loading NeMo's tokenizers must not hold up a page
        self._tokenizers = None
        self._json: OrderedDict[str, tuple[tuple[int, int], object]] = OrderedDict()
        self._json_lock = threading.Lock()
        self.trials = Trials("cpu")  # a viewer takes no GPU of a shared node

    def json(self, path: str):
        """The JSON file at `path` (confined to the roots), parsed once while its size and time stay;
        the last KEEP_JSON files asked for are kept."""
        path = self.confine(path)
        st = os.stat(path)
        stamp = (st.st_size, st.st_mtime_ns)
        with self._json_lock:
            known = self._json.get(path)
        if known is None or known[0] != stamp:
            known = (stamp, read_json(path))
        with self._json_lock:
            self._json[path] = known
            self._json.move_to_end(path)
            while len(self._json) > KEEP_JSON:
                self._json.popitem(last=False)
        return known[1]

    @functools.cached_property
    def segment_settings(self):
        """The segment settings the run used (its config over the schema's defaults)."""
        return settings_of_run(self.run.config)

    def dropped_symbols(self, text: str, names: list[str]) -> dict:
        """{symbols, why} of `text` that the tokenizers `names` skip (training.tokenizer's, else the
        offline ones the text stage measures with: sharflow.models.tokenizers)."""
        from sharflow.core.cache import cache_root
        from sharflow.models.tokenizers import Tokenizers, encode

        with self._tokenizing:
            if self._tokenizers is None:
                tokenizer = (self.run.config.get("training") or {}).get("tokenizer")
                cache = cache_root((self.run.config.get("text") or {}).get("cache_dir"))  # as the text stage
                self._tokenizers = Tokenizers(tokenizer, str(cache))
            built = {name: self._tokenizers.get(name) for name in names}
        symbols = dict.fromkeys(
            s for tok in built.values() if tok is not None for s in encode(tok, text).skipped
        )
        why = "; ".join(self._tokenizers.why[n] for n in names if built[n] is None)
        return {"symbols": list(symbols) if any(v is not None for v in built.values()) else None, "why": why}

    def warm(self) -> None:
        """Build every dataset's table now (the first request would)."""
        if self._warm:
            return
        with self._tables:
            for dataset in self.run.datasets.values():
                dataset.table  # noqa: B018 (a cached property: built here, once)
            self._warm = True

    def confine(self, address: str) -> str:
        """`address` if what it opens lies under the run's folder or a dataset's audio root, else
        OutsideRoots (sharflow.explore.roots)."""
        return self.roots.confine(address)

    def answer(self, route: str, query: dict[str, str]) -> tuple[bytes, str]:
        """(body, content type) of a GET of `route` with `query`."""
        if route in ("/", "/index.html"):
            return self.static["index.html"], STATIC_TYPES[".html"]
        if route.startswith("/static/"):
            name = route[len("/static/") :]
            if name not in self.static:
                raise NotFound(route)
            return self.static[name], STATIC_TYPES[Path(name).suffix]
        handler = api.ROUTES.get(route)
        if handler is None:
            raise NotFound(route)
        self.warm()
        result = handler(self, query)
        if isinstance(result, tuple):
            return result
        return json.dumps(result, allow_nan=False, default=_plain).encode(), "application/json"


def _plain(value):
    return None if value != value else str(value)  # NaN (never valid JSON) -> null


class Handler(BaseHTTPRequestHandler):
    """One request: checked (Host, token), routed to the Explorer, with byte ranges for audio (a player
    seeks with them)."""

    explorer: Explorer
    access: Access
    server_version = "sharflow-explore"
    timeout = TIMEOUT

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, head: bool) -> None:
        self.server.busy(self.request)
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        refused = self.access.refusal(parts.path, self.headers, query)
        if refused:
            return self._error(HTTPStatus.FORBIDDEN, refused)
        try:
            body, kind = self.explorer.answer(parts.path, query)
        except NotFound as e:
            return self._error(HTTPStatus.NOT_FOUND, f"not found: {e}" if e.shown else _UNSEEN)
        except (OutsideRoots, PathEscapeError, FileNotFoundError, KeyError):
            log.debug("explorer: %s: outside the roots or missing", self.path, exc_info=True)
            return self._error(HTTPStatus.NOT_FOUND, _UNSEEN)
        except (BadRequest, QueryError) as e:
            return self._error(HTTPStatus.BAD_REQUEST, str(e))
        except Exception:
            log.exception("explorer: %s failed", self.path)
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "this request failed; the log says why")
        if len(body) > api.MAX_ANSWER_BYTES:
            return self._error(HTTPStatus.BAD_REQUEST, api.too_large(len(body)))
        status, headers, body = _ranged(body, self.headers.get("Range"))
        if parts.path in ("/", "/index.html") and self.access.carries_token({}, query):
            headers["Set-Cookie"] = self.access.set_cookie()
        self._send(status, kind, body, {"Accept-Ranges": "bytes", **headers}, head)

    def _send(self, status: int, kind: str, body: bytes, headers: dict, head: bool = False) -> None:
        self.send_response(status)
        headers = {**HEADERS, "Content-Type": kind, "Content-Length": str(len(body)), **headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        self._send(status, "application/json", json.dumps({"error": message}).encode(), {})

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class ExplorerServer(ThreadingHTTPServer):
    """A threaded server that serves at most `MAX_CONNECTIONS` connections at once (a connection past
    that is told 503 at once) and whose server_close() does not wait for an idle connection: it shuts
    the idle ones and waits for the requests being answered (one importing NeMo's tokenizers must not
    be left half done)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address, handler, max_connections: int = MAX_CONNECTIONS):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: dict[socket.socket, bool] = {}  # connection -> whether a request is being answered
        self._changed = threading.Condition()

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            _busy(request)
            self.shutdown_request(request)
            return
        with self._changed:
            self._open[request] = False
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def busy(self, request) -> None:
        """Mark `request`'s connection as answering (server_close waits for it)."""
        with self._changed:
            if request in self._open:
                self._open[request] = True

    def connections(self) -> int:
        """How many connections are being served now."""
        with self._changed:
            return len(self._open)

    def _done(self, request) -> None:
        with self._changed:
            if self._open.pop(request, None) is not None:
                self._slots.release()
            self._changed.notify_all()

    def server_close(self) -> None:
        super().server_close()
        with self._changed:
            for request, answering in self._open.items():
                if not answering:
                    with contextlib.suppress(OSError):  # its read returns: its thread ends
                        request.shutdown(socket.SHUT_RDWR)
            self._changed.wait_for(lambda: not self._open)


def _busy(request) -> None:
    """Tell a connection past the bound to come back, without waiting on it (this is the accepting
    thread): what it has sent is drained first, so that closing does not reset the connection."""
    body = b'{"error": "the explorer is serving as many connections as it may; try again"}'
    head = ["HTTP/1.0 503 Service Unavailable", "Content-Type: application/json", "Retry-After: 1"]
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    with contextlib.suppress(OSError):
        request.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            request.recv(1 << 16)
        request.sendall("\r\n".join(head).encode() + body)


def _ranged(body: bytes, header: str | None) -> tuple[int, dict, bytes]:
    """(status, extra headers, body) for a `Range: bytes=a-b` header (one range), else the whole body."""
    if not header or not header.startswith("bytes=") or "," in header:
        return HTTPStatus.OK, {}, body
    first, _, last = header[len("bytes=") :].partition("-")
    size = len(body)
    try:
        start = int(first) if first else max(size - int(last), 0)
        end = min(int(last), size - 1) if first and last else size - 1
    except ValueError:
        return HTTPStatus.OK, {}, body
    if start > end or start >= size:
        return HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, {"Content-Range": f"bytes */{size}"}, b""
    return HTTPStatus.PARTIAL_CONTENT, {"Content-Range": f"bytes {start}-{end}/{size}"}, body[start : end + 1]


def serve(
    run: Run,
    host: str = "127.0.0.1",
    port: int = 8050,
    allow_hosts: tuple[str, ...] = (),
    max_connections: int = MAX_CONNECTIONS,
) -> ExplorerServer:
    """A server for `run` on host:port (port 0: any free one), not yet serving: call serve_forever()
    (or run it in a thread), then shutdown() and server_close() to stop it. Its `access` holds the
    token; `url` is the address to open, token included."""
    handler = type("ExplorerHandler", (Handler,), {"explorer": Explorer(run)})
    server = ExplorerServer((host, port), handler, max_connections)
    handler.access = Access(host, server.server_address[1], tuple(allow_hosts))
    server.access = handler.access
    shown = host if host not in ("0.0.0.0", "", "::") else socket.gethostname()
    shown = f"[{shown}]" if ":" in shown else shown
    server.url = f"http://{shown}:{server.server_address[1]}/?token={handler.access.token}"
    return server
