"""API keys: which paths need one, and whether a request carries it.

Only the OpenAI routes (`/v1` and everything under it, whatever handlers exist now or later)
need the key; `/` and `/static/...` (a page and its assets), `/healthz`, `/health` and the whole
health listener stay open, so a browser can load the page and a probe never needs a secret.
The key travels as `Authorization: Bearer <key>` or as `x-api-key: <key>` (the Anthropic
SDKs' header; Bearer wins when both come); it is compared in constant time
(`hmac.compare_digest`) and never echoed, logged, or put in an error message.
"""
from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from server.errors import ApiError
from server.http.protocol import Request

API_PREFIX = "/v1"
BEARER = "bearer"
ANTHROPIC_KEY_HEADER = "x-api-key"     # the Anthropic SDKs' way to send the key


def needs_key(path: str) -> bool:
    """True for the OpenAI routes: `/v1` and `/v1/...`."""
    return path == API_PREFIX or path.startswith(API_PREFIX + "/")


def bearer_token(request: Request) -> str | None:
    """The token of `Authorization: Bearer <token>` (scheme case-insensitive), or None."""
    value = request.header("authorization")
    if value is None:
        return None
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == BEARER and token.strip() else None


@dataclass(frozen=True)
class ApiKeyCheck:
    key: str = field(repr=False)             # "" = no key configured: every request passes

    def refusal(self, request: Request) -> ApiError | None:
        """None when the request may proceed; else the 401 to send."""
        if not self.key or not needs_key(request.path):
            return None
        token = bearer_token(request) or request.header(ANTHROPIC_KEY_HEADER)
        if token is None:
            return ApiError("invalid_api_key", "You didn't provide an API key. Send it as "
                            "'Authorization: Bearer <key>' or 'x-api-key: <key>'.",
                            headers=(("WWW-Authenticate", "Bearer"),))
        if not hmac.compare_digest(token.encode("utf-8"), self.key.encode("utf-8")):
            return ApiError("invalid_api_key", "Incorrect API key provided.",
                            headers=(("WWW-Authenticate", "Bearer"),))
        return None
