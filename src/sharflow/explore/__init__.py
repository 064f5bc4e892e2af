"""An explorer over a finished run, in a browser: every cut of every dataset's catalog to sort, filter
and play (target and context audio read in place from the Shar), each quality metric's threshold to
move with the hours it keeps and the cuts beside it, every reject and every held-out identity link.

`sharflow explore` (sharflow.explore.cli) starts it on 127.0.0.1; the page is plain HTML and JavaScript
shipped in this package (no CDN: it works offline), the API the standard library's HTTP server.
"""

from sharflow.core.exports import lazy_exports

__all__ = ["Run", "serve"]
__getattr__ = lazy_exports(__name__, {"Run": "run", "serve": "server"})
