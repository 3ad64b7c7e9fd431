"""CORS: let browser front-ends on other origins call the API (off unless configured).

`cors_allow_origins` is "" (off: no header is added and OPTIONS stays a 405), "*" (any
origin), or a comma-separated list of exact origins ("https://app.example"). When on:

* a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered
  204 at once, before authentication (browsers never send credentials on a preflight);
* every API response to an allowed `Origin`, errors and SSE streams included, carries
  `Access-Control-Allow-Origin` and exposes `X-Request-Id` and `Retry-After`.
"""
from __future__ import annotations

from dataclasses import dataclass

from server.http.protocol import Request, Response

Headers = tuple[tuple[str, str], ...]

ANY_ORIGIN = "*"
ALLOWED_METHODS = "GET, POST, OPTIONS"
ALLOWED_HEADERS = "Authorization, Content-Type, X-Request-Id, X-TL-Priority"
EXPOSED_HEADERS = "X-Request-Id, Retry-After"
PREFLIGHT_MAX_AGE_S = 600               # browsers cache a preflight this long


@dataclass(frozen=True)
class CorsPolicy:
    origins: tuple[str, ...] = ()       # () = off

    @staticmethod
    def parse(text: str) -> "CorsPolicy":
        return CorsPolicy(tuple(o.strip().rstrip("/") for o in text.split(",") if o.strip()))

    @property
    def enabled(self) -> bool:
        return bool(self.origins)

    def _allowed(self, request: Request) -> str | None:
        origin = request.header("origin")
        if not self.origins or origin is None:
            return None
        if ANY_ORIGIN in self.origins:
            return ANY_ORIGIN
        return origin if origin.rstrip("/") in self.origins else None

    def headers(self, request: Request) -> Headers:
        """The headers for an actual (non-preflight) response; () when not allowed."""
        allowed = self._allowed(request)
        if allowed is None:
            return ()
        vary = () if allowed == ANY_ORIGIN else (("Vary", "Origin"),)
        return (("Access-Control-Allow-Origin", allowed),
                ("Access-Control-Expose-Headers", EXPOSED_HEADERS)) + vary

    def preflight(self, request: Request) -> Response | None:
        """The 204 answer to a preflight, or None when `request` is not one (or CORS is off)."""
        if (not self.enabled or request.method != "OPTIONS" or request.header("origin") is None
                or request.header("access-control-request-method") is None):
            return None
        allowed = self._allowed(request)
        if allowed is None:                 # not allowed: no CORS headers, the browser refuses
            return Response(status=204, headers=(("Vary", "Origin"),))
        asked = request.header("access-control-request-headers")
        return Response(status=204, headers=(
            ("Access-Control-Allow-Origin", allowed),
            ("Access-Control-Allow-Methods", ALLOWED_METHODS),
            ("Access-Control-Allow-Headers", asked or ALLOWED_HEADERS),
            ("Access-Control-Max-Age", str(PREFLIGHT_MAX_AGE_S)),
            ("Vary", "Origin")))
