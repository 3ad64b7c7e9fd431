"""Gemma 3 270M served with its chat template given by `chat_template` (the GGUF has none).

The real GGUF ships no template, so the server is started with the oracle's Gemma 3
template (the npm tokenizer_config.json's) as `[engine].chat_template`; each oracle case sent
to /v1/tokenize as messages must give Hugging Face's `rendered_ids` (the template's text,
tokenized with special tokens parsed, no BOS added twice), and the role-order case a 400
carrying the template's own message.
"""
from __future__ import annotations

import pytest
import requests

from tests.e2e.helpers import post, running_server
from tests.family_tokens import GEMMA, family_jsonl
from tests.oracle import REPO_ROOT

pytestmark = pytest.mark.real_model

CASES = family_jsonl(GEMMA, "template_cases.jsonl")


@pytest.fixture(scope="module")
def gemma_chat(tmp_path_factory):
    from cli.fetch import GEMMA as GEMMA_FETCH, ensure_model
    folder = ensure_model(REPO_ROOT / GEMMA_FETCH.default_dest, model=GEMMA_FETCH.name)
    template = tmp_path_factory.mktemp("gemma") / "gemma3.jinja"
    template.write_text(CASES[0]["template_source"], encoding="utf-8")
    with running_server(folder, chat_template=str(template)) as handle:
        model = requests.get(handle.http_url + "/v1/models", timeout=30).json()["data"][0]["id"]
        yield handle, model


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_a_chat_tokenizes_to_hugging_faces_ids(gemma_chat, case):
    handle, model = gemma_chat
    response = post(handle, "/v1/tokenize", {
        "model": model, "messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]})
    if case["error"] is not None:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"] == case["error"]["message"]
        return
    assert response.status_code == 200, response.text
    assert response.json()["tokens"] == case["rendered_ids"]
