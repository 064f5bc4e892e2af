"""The explorer's web server: a plain page and a JSON API over one run, on the standard library's
threaded HTTP server.

Every request names things, never files: a dataset (one of the run's), a cut id (a row of its table),
a stage and a reason (one of the reject files the stage folder holds), a line number. The file that
answers is asked of the layout, and opened only if it lies under the run's folder or one of its
datasets' audio roots (`Explorer.confine`). Anything else is a 404; a bad filter or number a 400 with
the reason. It binds 127.0.0.1 unless told otherwise, and serves GET and HEAD alone.

Routes (all GET): / and /static/<file> (the page); /api/datasets; /api/cuts?dataset&filter&sort&desc&
page&size; /api/cut?dataset&id; /api/threshold?dataset&metric&value&side; /api/rejects?dataset;
/api/reject_rows?dataset&stage&reason&page; /api/links?page; /audio/cut?dataset&id&kind (target or
context); /audio/reject?dataset&stage&reason&n; /audio/link?n&side (record or matched);
/picture/cut?dataset&id&kind.
"""

import json
import logging
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from sharflow.core.audio import PathEscapeError
from sharflow.explore import api
from sharflow.explore.api import BadRequest, NotFound
from sharflow.explore.query import QueryError
from sharflow.explore.run import Run

log = logging.getLogger(__name__)

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript", ".css": "text/css"}


class Explorer:
    """The run being explored and what answers each route (`answer`)."""

    def __init__(self, run: Run):
        self.run = run
        self.roots = [str(run.root), *sorted(set(run.audio_roots.values()))]
        folder = resources.files("sharflow.explore") / "static"
        self.static = {
            p.name: p.read_bytes() for p in folder.iterdir() if p.name.endswith(tuple(STATIC_TYPES))
        }
        self._tables = threading.Lock()
        self._warm = False
        self._tokenizing = threading.Lock()  # its own: loading NeMo's tokenizers must not hold up a page
        self._tokenizers = None

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

    def confine(self, path: str) -> str:
        """`path` if it lies under the run's folder or a dataset's audio root, else NotFound."""
        if "://" in path:
            return path
        real = os.path.realpath(path.split("#", 1)[0])
        for root in self.roots:
            if "://" not in root and (real + os.sep).startswith(os.path.join(os.path.realpath(root), "")):
                return path
        raise NotFound(path)

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
    """One request: routed to the Explorer, with byte ranges for audio (a player seeks with them)."""

    explorer: Explorer
    server_version = "sharflow-explore"

    def do_GET(self) -> None:
        self._respond(head=False)

    def do_HEAD(self) -> None:
        self._respond(head=True)

    def _respond(self, head: bool) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        try:
            body, kind = self.explorer.answer(parts.path, query)
        except (NotFound, PathEscapeError, FileNotFoundError, KeyError):
            return self._error(HTTPStatus.NOT_FOUND, "not found: this run has no such thing")
        except (BadRequest, QueryError, ValueError) as e:
            return self._error(HTTPStatus.BAD_REQUEST, str(e))
        except Exception as e:
            log.exception("explorer: %s failed", self.path)
            return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")
        status, headers, body = _ranged(body, self.headers.get("Range"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Cache-Control", "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s %s", self.address_string(), format % args)


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


def serve(run: Run, host: str = "127.0.0.1", port: int = 8050) -> ThreadingHTTPServer:
    """A server for `run` on host:port (port 0: any free one), not yet serving: call serve_forever()
    (or run it in a thread) and shutdown() to stop it."""
    explorer = Explorer(run)
    handler = type("ExplorerHandler", (Handler,), {"explorer": explorer})
    server = ThreadingHTTPServer((host, port), handler)
    # server_close() waits for the requests in flight: one still importing NeMo's tokenizers in a
    # thread must not outlive the server (an import left half done deadlocks the next one)
    server.daemon_threads = False
    server.block_on_close = True
    return server
