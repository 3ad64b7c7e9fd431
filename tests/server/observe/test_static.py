"""The built-in pages: served from the package, same-origin only, never HTML from text."""
from __future__ import annotations

import configparser
import fnmatch
import re

import pytest
import requests

from server.observe.static import WEB_DIR, StaticFiles
from tests.e2e.helpers import TIMEOUT_S, running_server
from tests.oracle import REPO_ROOT


@pytest.fixture(scope="module")
def server(succ_model_dir):
    with running_server(succ_model_dir) as handle:
        yield handle


def test_pages_and_their_files_are_served_with_a_same_origin_policy(server):
    cases = [(server.http_url + "/", "text/html", b'src="/static/chat.js"'),
             (server.http_url + "/static/chat.js", "text/javascript", b"textContent"),
             (server.http_url + "/static/chat.css", "text/css", b"#log"),
             (server.health_url + "/engine", "text/html", b'src="/static/engine.js"'),
             (server.health_url + "/static/engine.js", "text/javascript", b"/engine/snapshot")]
    for url, content_type, marker in cases:
        r = requests.get(url, timeout=TIMEOUT_S)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(content_type), url
        assert marker in r.content, url
        csp = r.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert r.headers["X-Content-Type-Options"] == "nosniff"


def test_favicon_is_an_icon_on_both_ports_and_the_pages_link_it(server):
    icon = (WEB_DIR / "favicon.ico").read_bytes()
    assert icon[:4] == b"\0\0\1\0"                     # an ICO header: reserved 0, type 1 (icon)
    for base in (server.http_url, server.health_url):
        r = requests.get(base + "/favicon.ico", timeout=TIMEOUT_S)
        assert r.status_code == 200, base
        assert r.headers["Content-Type"] == "image/x-icon" and r.content == icon, base
    for page in (server.http_url + "/", server.health_url + "/engine"):
        assert b'<link rel="icon" href="/favicon.ico"' in requests.get(page, timeout=TIMEOUT_S
                                                                        ).content, page


def test_only_the_known_files_are_served(server):
    for path in ("/static/nope.js", "/static/..%2Fserve.py", "/static/../app.py",
                 "/static/static.py"):
        r = requests.get(server.http_url + path, timeout=TIMEOUT_S)
        assert r.status_code == 404, path
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert requests.post(server.http_url + "/", timeout=TIMEOUT_S).status_code == 405


def test_the_pages_fetch_nothing_external_and_never_insert_html():
    files = StaticFiles.load().files
    assert set(files) == {"index.html", "chat.css", "chat.js", "engine.html", "engine.css",
                          "engine.js", "favicon.ico"}
    for name, (content_type, body) in files.items():
        if content_type.startswith("image/"):
            continue                                       # pixels, no text to check
        text = body.decode("utf-8")
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), name
        assert "@import" not in text and "url(" not in text, name
        if name.endswith(".js"):
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                         "eval(", "new Function"):
                assert sink not in text, (name, sink)
        if name.endswith(".html"):
            assert not re.search(r"<script(?![^>]*\ssrc=)", text), name     # no inline script
            assert not re.search(r"<[^>]*\son[a-z]+\s*=", text, re.I), name  # no on* handlers


def test_an_installed_wheel_carries_the_pages():
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["server.observe"].split(",")]
    for path in WEB_DIR.iterdir():
        relative = f"web/{path.name}"
        assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative
