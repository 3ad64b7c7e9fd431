"""Shared fixtures: the test models (written once per session) and the paths they live at.

* `shared_dir`: ../shared (the oracle, the spec), found from this file, not hard-coded.
* `real_model_dir`: artifacts/models/smol-135m after `engine.fetch.ensure_model()` (instant
  when the model is already there; a download otherwise, as `fetch-model` would do).
* `succ_model_dir`, `tiny_llama_dir` (HF safetensors layout), `tiny_llama_gguf` (a .gguf
  path): written by tests/models.py under a session temporary directory.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import models

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return (REPO_ROOT / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def real_model_dir() -> Path:
    from engine.fetch import ensure_model
    return ensure_model()


@pytest.fixture(scope="session")
def succ_model_dir(tmp_path_factory) -> Path:
    return models.write_succ_model(tmp_path_factory.mktemp("models") / "succ")


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    return models.write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_llama_gguf(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("models") / "tiny-llama-gguf"
    return models.write_tiny_llama_gguf(directory / "tiny-llama.Q8_0-Q4_1.gguf")
