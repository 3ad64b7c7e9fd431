"""What the adapter reader refuses, and that each refusal names the key and the file.

A PEFT option whose maths is not implemented must never be skipped silently: the adapter
would load and answer differently from PEFT. Each case writes an otherwise valid adapter
(tests/engine/model/lora_writers.py) with one thing changed.
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.errors import ModelFormatError, UnsupportedModel
from engine.formats.safetensors import SafetensorsFile
from engine.model.loader import load_model
from engine.model.lora import load_adapter
from tests.engine.core.engine_models import random_model
from tests.engine.model.lora_writers import random_pairs, write_adapter
from tests.formats_writers import write_safetensors
from tests.oracle import ORACLE_DIR

MODULES = {"model.layers.0.self_attn.q_proj": 4, "model.layers.0.self_attn.v_proj": 4,
           "model.layers.1.self_attn.q_proj": 4, "model.layers.1.self_attn.v_proj": 4}


@pytest.fixture(scope="module")
def base():
    return random_model(seed=3)


def _refused(folder, base, error, *words):
    with pytest.raises(error) as caught:
        load_adapter(folder, base.config)
    message = str(caught.value)
    for word in words:
        assert word in message, (word, message)
    return message


def test_the_valid_adapter_the_cases_change_loads(base, tmp_path):
    adapter = load_adapter(write_adapter(tmp_path / "ok", random_pairs(base, MODULES, 0)),
                           base.config)
    assert adapter.modules == tuple(sorted(MODULES))
    assert adapter.max_rank == 4


CONFIG_REFUSALS = [
    ("use_dora", True), ("modules_to_save", ["lm_head"]), ("lora_bias", True),
    ("fan_in_fan_out", True), ("layer_replication", [[0, 2]]),
    ("trainable_token_indices", [1, 2]), ("target_parameters", ["mlp.experts.down_proj"]),
    ("exclude_modules", ["o_proj"]), ("alora_invocation_tokens", [5, 6]),
    ("peft_type", "LOHA"), ("bias", "all"), ("task_type", "SEQ_CLS"),
    ("velora_config", {"rank": 2}), ("an_option_of_a_newer_peft", True),
]


@pytest.mark.parametrize("key,value", CONFIG_REFUSALS)
def test_config_options_not_implemented_are_refused(base, tmp_path, key, value):
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, MODULES, 0), **{key: value})
    _refused(folder, base, UnsupportedModel, key, str(folder / "adapter_config.json"))


BAD_CONFIG_VALUES = [
    ({"r": 0}, "r"), ({"r": "4"}, "r"), ({"lora_alpha": None}, "lora_alpha"),
    ({"use_rslora": "yes"}, "use_rslora"), ({"target_modules": None}, "target_modules"),
    ({"target_modules": "(q_proj"}, "target_modules"),
    ({"target_modules": ".*_proj", "layers_to_transform": [0]}, "layers_to_transform needs"),
    ({"rank_pattern": {"q_proj": -1}}, "rank_pattern"),
    ({"layers_to_transform": ["0"]}, "layers_to_transform"),
]


@pytest.mark.parametrize("config,key", BAD_CONFIG_VALUES)
def test_malformed_config_values_are_refused(base, tmp_path, config, key):
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, MODULES, 0), **config)
    _refused(folder, base, ModelFormatError, key, str(folder / "adapter_config.json"))


LM_HEAD = "base_model.model.lm_head.lora_A.weight"
EMBEDDING = "base_model.model.model.embed_tokens.lora_embedding_A"
TENSOR_REFUSALS = [
    (LM_HEAD, (4, 32), "LM-head adapter"),
    ("base_model.model.model.embed_tokens.lora_A.weight", (4, 64), "embedding adapter"),
    (EMBEDDING, (4, 64), "embedding adapter"),
    ("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", (32,), "DoRA"),
    ("base_model.model.model.layers.0.self_attn.q_proj.lora_B.bias", (32,), "LoRA bias"),
    ("base_model.model.model.layers.0.self_attn.q_proj.bias", (32,), "not a LoRA weight"),
    ("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", (4, 32), "another architecture"),
]


@pytest.mark.parametrize("key,shape,words", TENSOR_REFUSALS)
def test_tensors_other_than_the_decoders_lora_weights_are_refused(base, tmp_path, key, shape, words):
    extra = {key: np.zeros(shape, np.float32)}
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, MODULES, 0), extra)
    _refused(folder, base, UnsupportedModel, key, words,
             str(folder / "adapter_model.safetensors"))


def test_a_rank_that_disagrees_with_the_config_is_refused(base, tmp_path):
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, MODULES, 0), r=8)
    _refused(folder, base, ModelFormatError,
             "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "rank 8")


def test_an_adapter_for_a_wider_base_is_refused(base, tmp_path):
    wider = random_model(d=48, seed=3)
    folder = write_adapter(tmp_path / "adapter", random_pairs(wider, MODULES, 0))
    _refused(folder, base, ModelFormatError, "lora_A.weight", "[4, 32]", "inputs from the base")


def test_a_layer_the_base_does_not_have_is_refused(base, tmp_path):
    deeper = {**MODULES, "model.layers.5.self_attn.q_proj": 4}
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, deeper, 0))
    _refused(folder, base, ModelFormatError, "model.layers.5.self_attn.q_proj", "2 layers")


def test_the_real_smol_adapter_does_not_fit_the_qwen3_tiny_base(tmp_path):
    qwen = load_model(ORACLE_DIR / "families" / "qwen3-tiny" / "model")
    folder = ORACLE_DIR / "lora" / "smol-135m-lora"
    _refused(folder, qwen, ModelFormatError, str(folder / "adapter_model.safetensors"),
             "another base")


def test_half_a_pair_is_refused(base, tmp_path):
    pairs = random_pairs(base, MODULES, 0)
    folder = write_adapter(tmp_path / "adapter", pairs)
    key = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    tensors_path = folder / "adapter_model.safetensors"
    written = SafetensorsFile(tensors_path)
    kept = {n: np.array(written.tensor(n)) for n in written.names() if n != key}
    del written
    write_safetensors(tensors_path, kept)
    _refused(folder, base, ModelFormatError, key, str(tensors_path))


def test_a_folder_without_the_two_files_is_refused(base, tmp_path):
    _refused(tmp_path, base, ModelFormatError, "adapter_config.json")
    folder = write_adapter(tmp_path / "adapter", random_pairs(base, MODULES, 0))
    (folder / "adapter_model.safetensors").unlink()
    _refused(folder, base, ModelFormatError, "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text("{not json", encoding="utf-8")
    _refused(folder, base, ModelFormatError, "not valid JSON")

