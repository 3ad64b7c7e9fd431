"""The built-in pages: plain HTML, CSS and JavaScript files shipped in `server/observe/web/`.

`GET /` on the API port is the chat page, `GET /engine` on the health port the engine
view; both load their scripts and styles from `GET /static/<name>` on their own port, and
both ports answer `GET /favicon.ico` with the pages' icon.
The files are read once, at start-up, into a table of name -> bytes; a name outside the
table is a 404 (no path is ever joined from a request, so `..` has nothing to reach). A
route table row whose handler is a `WebFile` is answered with one of these files.

Every answer carries a Content-Security-Policy that allows scripts, styles and fetches
from this origin only (no inline script, no CDN, nothing external): a second wall behind
the pages' own rule of never inserting model or user text as HTML.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server.errors import ApiError
from server.http.protocol import Response

WEB_DIR = Path(__file__).resolve().parent / "web"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".js": "text/javascript; charset=utf-8", ".ico": "image/x-icon"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                    ("Referrer-Policy", "no-referrer"), ("Cache-Control", "no-cache"))
CHAT_PAGE, ENGINE_PAGE = "index.html", "engine.html"
FAVICON = "favicon.ico"            # also at /favicon.ico on both ports, where browsers look


@dataclass(frozen=True)
class WebFile:
    """A route answered with a file of the pages: a fixed one (`name`), or the one the
    path parameter `param` names (`/static/{name}`)."""
    name: str = ""
    param: str = ""

    def name_in(self, params: dict[str, str]) -> str:
        return params[self.param] if self.param else self.name


@dataclass(frozen=True)
class StaticFiles:
    """name -> (content type, bytes) for every file in WEB_DIR, read once."""
    files: dict[str, tuple[str, bytes]]

    @staticmethod
    def load(directory: Path = WEB_DIR) -> "StaticFiles":
        return StaticFiles({p.name: (CONTENT_TYPES[p.suffix], p.read_bytes())
                            for p in sorted(directory.iterdir()) if p.suffix in CONTENT_TYPES})

    def answer(self, file: WebFile, params: dict[str, str]) -> Response:
        """The answer of a `WebFile` route matched with path parameters `params`."""
        return self.response(file.name_in(params))

    def response(self, name: str) -> Response:
        """The file as a 200, or the 404 ApiError for a name that is not served."""
        if name not in self.files:
            raise ApiError("route_not_found", f"Unknown static file: {name!r}.")
        content_type, body = self.files[name]
        return Response(status=200, headers=(("Content-Type", content_type),) + SECURITY_HEADERS,
                        body=body)
