"""The Vercel AI SDK's Anthropic provider (`@ai-sdk/anthropic`, pinned beside `ai` in the
Makefile's NODE_PINS) against a real server: generateText and streamText the same answer
(succ model, temperature 0), and a forced tool call whole and streamed (smol-135m)."""
from __future__ import annotations

import json
import subprocess

import pytest

from server.config import EngineConfig
from tests.e2e.helpers import NODE_DIR, node, running_server  # noqa: F401  (node: a fixture)

DRIVER = NODE_DIR / "ai_sdk_anthropic.mjs"
CLIENT_TIMEOUT_S = 60
TOOL_TIMEOUT_S = 300            # two forced calls of the 135M model on a busy CPU


def _run(node, server, model: str, mode: str, timeout_s: float) -> dict:
    run = subprocess.run([node, str(DRIVER), server.http_url + "/v1", model, mode],
                         capture_output=True, text=True, timeout=timeout_s)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_ai_sdk_anthropic_generate_and_stream_text(node, succ_model_dir):
    with running_server(succ_model_dir) as server:
        seen = _run(node, server, "succ", "text", CLIENT_TIMEOUT_S)
    whole, streamed = seen["whole"], seen["streamed"]
    assert whole["text"] == streamed["text"] == "defgh"
    assert whole["finish"] == streamed["finish"] == "length"       # max_tokens
    assert (whole["usage"]["inputTokens"], whole["usage"]["outputTokens"]) == (3, 5)
    assert streamed["parts"].count("text-delta") == 5


@pytest.mark.real_model
def test_ai_sdk_anthropic_calls_a_tool_whole_and_streamed(node, real_model_dir):
    with running_server(real_model_dir, engine=EngineConfig(kv_cache_mib=32)) as server:
        seen = _run(node, server, real_model_dir.name, "tool", TOOL_TIMEOUT_S)
    for answer in (seen["whole"], seen["streamed"]):
        assert [c["name"] for c in answer["calls"]][:1] == ["weather"]
        assert answer["calls"][0]["input"]["city"] in ("Paris", "Oslo", "Lima")
        assert answer["calls"][0]["id"].startswith("toolu_")
    parts = seen["streamed"]["parts"]
    assert parts.index("tool-input-start") < parts.index("tool-input-delta") < \
        parts.index("tool-input-end") < parts.index("tool-call")
