"""Node clients of the Responses API against a real server (the npm packages pinned in the
Makefile's `node-client` target, installed into tests/e2e/node/node_modules): openai-node's
`responses.create` (a whole answer, a stream, and a refusal, as the Node client parses
them), and the Vercel AI SDK's default OpenAI provider calling a tool (on smol-135m)."""
from __future__ import annotations

import json
import subprocess

import pytest

from server.config import EngineConfig
from tests.e2e.helpers import NODE_DIR, node, running_server  # noqa: F401  (node: a fixture)

DRIVER = NODE_DIR / "responses_client.mjs"
AI_SDK_DRIVER = NODE_DIR / "ai_sdk_tools.mjs"
CLIENT_TIMEOUT_S = 60
AI_SDK_TIMEOUT_S = 300          # two forced calls of the 135M model on a busy CPU


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


@pytest.mark.real_model
def test_vercel_ai_sdk_default_provider_calls_a_tool_whole_and_streamed(node, real_model_dir):
    with running_server(real_model_dir, engine=EngineConfig(kv_cache_mib=32)) as server:
        run = subprocess.run([node, str(AI_SDK_DRIVER), server.http_url + "/v1",
                              real_model_dir.name],
                             capture_output=True, text=True, timeout=AI_SDK_TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    for answer in (seen["whole"], seen["streamed"]):
        assert answer["finish"] == "tool-calls"
        assert [c["name"] for c in answer["calls"]] == ["weather"]
        assert answer["calls"][0]["input"]["city"] in ("Paris", "Oslo", "Lima")
        assert answer["calls"][0]["id"].startswith("call_")
    assert seen["whole"]["usage"]["outputTokens"] < 80     # the repeated call ended it
    parts = seen["streamed"]["parts"]
    assert parts.index("tool-input-start") < parts.index("tool-input-delta") < \
        parts.index("tool-input-end") < parts.index("tool-call")
