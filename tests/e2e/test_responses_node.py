"""openai-node's `responses.create` (the npm package `openai`, pinned in the Makefile's
`node-client` target and installed into tests/e2e/node/node_modules) against a real server:
a whole answer, a stream, and a refusal, as the Node client parses them."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.helpers import running_server

NODE_DIR = Path(__file__).parent / "node"
DRIVER = NODE_DIR / "responses_client.mjs"
CLIENT_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None or not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.fail("openai-node is not installed: run `make node-client` (Debian's nodejs + "
                    "npm, then the pinned npm package `openai` into tests/e2e/node)")
    return found


def test_openai_node_responses_create_whole_and_streamed(node, succ_model_dir):
    with running_server(succ_model_dir) as server:
        run = subprocess.run([node, str(DRIVER), server.http_url + "/v1", "succ"],
                             capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    whole = seen["whole"]
    assert whole["id"].startswith("resp_") and whole["text"] == "bcd"
    assert (whole["status"], whole["reason"]) == ("incomplete", "max_output_tokens")
    assert whole["usage"]["output_tokens"] == 3
    assert whole["usage"]["total_tokens"] == whole["usage"]["input_tokens"] + 3
    events = seen["events"]
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added"] + ["response.output_text.delta"] * 4 + [
        "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.incomplete"]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert "".join(e.get("delta") or "" for e in events) == "lmno" == seen["final"]
    assert seen["refused"] == {"status": 422, "param": "store"}
