"""Structured-output clients as their users call them, on smol-135m: instructor's JSON mode
(its own venv, `.venv-instructor`: it pins an older openai client) and the Vercel AI SDK's
`generateObject` and a tool forced by name through its Responses provider. Room enough:
the object comes back valid; a few tokens: a token limit, told as one (instructor's
IncompleteOutputException; the AI SDK's errors for a missing object and a missing call)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from server.config import EngineConfig
from tests.e2e.helpers import REAL_KV_CACHE_MIB, node, server_fixture  # noqa: F401  (node: a fixture)

pytestmark = pytest.mark.real_model

REPO = Path(__file__).resolve().parents[2]
INSTRUCTOR_PYTHON = REPO / ".venv-instructor" / "bin" / "python"
INSTRUCTOR_DRIVER = Path(__file__).parent / "instructor_client.py"
AI_SDK_DRIVER = Path(__file__).parent / "node" / "ai_sdk_objects.mjs"
PROMPT = "Maria Lindqvist is 34 years old and works as a nurse."
CLIENT_TIMEOUT_S = 300

server = server_fixture("real_model_dir", engine=EngineConfig(kv_cache_mib=REAL_KV_CACHE_MIB))


def run_driver(command: list[str], prompts_file: Path) -> list[dict]:
    prompts_file.write_text(json.dumps([PROMPT]))
    run = subprocess.run(command, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert run.returncode == 0, run.stderr
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_instructor_json_mode_returns_the_object_or_says_length(server, real_model_dir, tmp_path):
    if not INSTRUCTOR_PYTHON.exists():
        pytest.fail("instructor's venv is missing: run `make instructor`")
    prompts = tmp_path / "prompts.json"
    base = [str(INSTRUCTOR_PYTHON), str(INSTRUCTOR_DRIVER), server.http_url + "/v1",
            real_model_dir.name, str(prompts)]
    [whole] = run_driver(base + ["200"], prompts)
    assert whole["error"] is None and whole["finish"] == "stop", whole
    assert whole["object"]["name"] and isinstance(whole["object"]["age"], int)
    [cut] = run_driver(base + ["4"], prompts)
    assert cut == {"finish": "length", "object": None, "error": "IncompleteOutputException"}


def test_ai_sdk_generate_object_and_a_forced_tool_through_responses(node, server,  # noqa: F811
                                                                    real_model_dir, tmp_path):
    prompts = tmp_path / "prompts.json"
    base = [node, str(AI_SDK_DRIVER), server.http_url + "/v1", real_model_dir.name, str(prompts)]
    obj, forced = run_driver(base + ["200"], prompts)
    assert obj["error"] is None and obj["finish"] == "stop", obj
    assert set(obj["object"]) == {"name", "age", "job"}
    assert forced["error"] is None and forced["finish"] == "tool-calls", forced
    assert [c["name"] for c in forced["calls"]] == ["booking"]
    # cut inside the one call a named tool makes: no call and no text come back (the
    # answer is `incomplete`, its output empty), so the SDK reports the forced tool
    # missing; and an object cut short is no object
    obj, forced = run_driver(base + ["6"], prompts)
    assert forced == {"call": "forcedTool", "finish": None, "error": "AI_ToolChoiceViolationError"}
    assert obj == {"call": "generateObject", "finish": None, "error": "AI_NoObjectGeneratedError"}
