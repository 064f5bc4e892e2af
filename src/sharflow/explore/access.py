"""Who the explorer answers: requests to one of its own names, carrying the token made at its start.

Two checks, as Jupyter and TensorBoard make them, before any route answers:

- **Host**: the request's `Host` header must be one of the server's names with its port (127.0.0.1,
  localhost, [::1], the address it binds, the names `--allow-host` adds; for a wildcard bind also this
  machine's host names). A page on another site whose name is made to resolve to 127.0.0.1 (DNS
  rebinding) sends its own name, and is refused: 403.
- **Token**: every route that reads the run (/api, /audio, /picture) needs the random token printed
  in the URL at start (`?token=...`), compared in constant time. The page given the token in its URL
  sets it as a cookie for this port only (HttpOnly, SameSite=Strict), so its own requests, players and
  pictures carry it; a script may send `Authorization: token <token>`. The page itself and its static
  files hold nothing of the run and need no token.

No CORS header is ever sent: another origin's script cannot read an answer.
"""

import hmac
import ipaddress
import secrets
import socket
from http.cookies import CookieError, SimpleCookie

LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")
GUARDED = ("/api/", "/audio/", "/picture/")


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server to this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_names(host: str, port: int, extra: tuple[str, ...] = ()) -> frozenset[str]:
    """The `Host` header values the server answers: each name with `:port` (and bare on port 80)."""
    names = {*LOOPBACK, *extra}
    if host in WILDCARDS:
        names |= {socket.gethostname(), socket.getfqdn()}
    elif host:
        names.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    names = {n.lower() for n in names if n}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


class Access:
    """The token and the host names of one server; `refusal` says why a request may not be answered."""

    def __init__(self, host: str, port: int, extra_hosts: tuple[str, ...] = (), token: str | None = None):
        self.token = token or secrets.token_urlsafe(32)
        self.port = port
        self.hosts = host_names(host, port, extra_hosts)
        self.cookie = f"sharflow-explore-{port}"  # a browser shares cookies across ports: one a server

    def refusal(self, route: str, headers, query: dict[str, str]) -> str | None:
        """None when the request may be answered, else the reason it may not (sent with a 403)."""
        if (headers.get("Host") or "").lower() not in self.hosts:
            return (
                "this explorer answers only requests to its own address "
                f"(http://127.0.0.1:{self.port}/ or a name --allow-host gave it)"
            )
        if route.startswith(GUARDED) and not self.carries_token(headers, query):
            return (
                "this explorer needs its token: open the link `sharflow explore` printed "
                f"(http://127.0.0.1:{self.port}/?token=...)"
            )
        return None

    def carries_token(self, headers, query: dict[str, str]) -> bool:
        """Whether the request holds the token: in its query, its Authorization header or its cookie."""
        offered = [query.get("token"), _authorization(headers.get("Authorization"))]
        offered.append(_cookie(headers.get("Cookie"), self.cookie))
        return any(v is not None and hmac.compare_digest(v.encode(), self.token.encode()) for v in offered)

    def set_cookie(self) -> str:
        """The Set-Cookie value that gives a page its token."""
        return f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"


def _authorization(value: str | None) -> str | None:
    scheme, _, token = (value or "").partition(" ")
    return token.strip() if scheme.lower() in ("token", "bearer") and token.strip() else None


def _cookie(value: str | None, name: str) -> str | None:
    if not value:
        return None
    try:
        morsel = SimpleCookie(value).get(name)
    except CookieError:
        return None
    return None if morsel is None else morsel.value
