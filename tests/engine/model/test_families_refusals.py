"""Never load and answer wrongly: a key or tensor that changes unimplemented maths refuses
the model at load, naming the key (or tensor) and the file.

Folder cases edit the config.json of the families oracle's tiny models (weights and
tokenizer linked, not copied); GGUF cases write the project's tiny Llama GGUF with one
metadata key or tensor added (tests/models.py).
"""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from engine.errors import UnsupportedModel
from engine.formats.gguf import GGUFFile
from engine.model import rope
from engine.model.loader import load_model
from engine.model.spec import Llama3RopeScaling
from tests.engine.formats.format_errors import expect_format_error
from tests.formats_writers import write_gguf
from tests.models import tiny_gguf_metadata, tiny_gguf_tensors
from tests.oracle import ORACLE_DIR

FAMILIES_DIR = ORACLE_DIR / "families"
LINKED_FILES = ("model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _folder(tmp_path, family: str, **edits):
    """The family's model/ folder with config.json edited (None deletes a key)."""
    source = FAMILIES_DIR / family / "model"
    target = tmp_path / family
    target.mkdir()
    for name in LINKED_FILES:
        os.symlink((source / name).resolve(), target / name)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    for key, value in edits.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (target / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return target


FOLDER_REFUSALS = [
    ("qwen2-tiny", {"model_type": "gemma3", "text_config": {},
                    "vision_config": {"model_type": "siglip_vision_model"}},
     "vision_config", "vision tower"),
    ("qwen2-tiny", {"model_type": "gemma3_text"}, "unknown tensor", "gemma3"),
    ("qwen2-tiny", {"model_type": None, "architectures": ["MistralForCausalLM"]},
     "architectures", "MistralForCausalLM"),
    ("llama32-tiny", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     "rope_scaling.rope_type", "yarn"),
    ("qwen2-tiny", {"rope_parameters": {"rope_type": "linear", "factor": 2.0,
                                        "rope_theta": 1e6}},
     "rope_parameters.rope_type", "linear"),
    ("qwen3-tiny", {"rope_parameters": {"full_attention": {"rope_type": "default"},
                                        "sliding_attention": {"rope_type": "default"}}},
     "rope_parameters", "per layer type"),
    ("qwen3-tiny", {"partial_rotary_factor": 0.5}, "partial_rotary_factor", "0.5"),
    ("qwen3-tiny", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping", "50.0"),
    ("qwen3-tiny", {"final_logit_softcapping": 30.0}, "final_logit_softcapping", "30.0"),
    ("qwen2-tiny", {"use_sliding_window": True, "sliding_window": 4096},
     "use_sliding_window", "True"),
    ("llama32-tiny", {"sliding_window": 4096}, "sliding_window", "sliding-window"),
    ("qwen3-tiny", {"layer_types": ["sliding_attention", "full_attention"]},
     "layer_types", "sliding_attention"),
    ("llama32-tiny", {"attention_bias": True}, "attention_bias", "biases"),
    ("llama32-tiny", {"mlp_bias": True}, "mlp_bias", "True"),
    ("qwen2-tiny", {"hidden_act": "gelu"}, "hidden_act", "gelu"),
    # weights of a family read as another: a tensor the decoder would skip
    ("qwen3-tiny", {"model_type": "llama"}, "unknown tensor", "self_attn.k_norm"),
    ("qwen2-tiny", {"model_type": "llama"}, "unknown tensor", "self_attn.k_proj.bias"),
]


@pytest.mark.parametrize("family,edits,key,detail", FOLDER_REFUSALS,
                         ids=[f"{f}-{k}" for f, _, k, _ in FOLDER_REFUSALS])
def test_folder_key_that_changes_the_maths_is_refused(tmp_path, family, edits, key, detail):
    folder = _folder(tmp_path, family, **edits)
    message = expect_format_error(load_model, folder, key, detail)
    assert "fetch-model" not in message
    with pytest.raises(UnsupportedModel):      # not a broken file: fetching again won't help
        load_model(folder)


def test_harmless_values_of_those_keys_still_load(tmp_path):
    """Qwen2.5's shipped configs name a window they do not use; plain RoPE written out."""
    folder = _folder(tmp_path, "qwen2-tiny", sliding_window=32768, use_sliding_window=False,
                     partial_rotary_factor=1.0, attention_bias=True,
                     rope_scaling={"rope_type": "default"})
    assert load_model(folder).config.options.qkv_bias


def _tiny_gguf(tmp_path, extra_meta=None, extra_tensors=None):
    meta = tiny_gguf_metadata() | (extra_meta or {})
    tensors = tiny_gguf_tensors() | (extra_tensors or {})
    return write_gguf(tmp_path / "tiny.gguf", meta, tensors)


GGUF_REFUSALS = [
    ({"general.architecture": "phi3"}, "general.architecture", "phi3"),
    ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0},
     "llama.rope.scaling.type", "linear"),
    ({"llama.rope.scaling.type": "yarn"}, "llama.rope.scaling.type", "yarn"),
    ({"llama.attn_logit_softcapping": 50.0}, "llama.attn_logit_softcapping", "50.0"),
    ({"llama.final_logit_softcapping": 30.0}, "llama.final_logit_softcapping", "30.0"),
    ({"llama.attention.sliding_window": 512}, "llama.attention.sliding_window", "512"),
    ({"llama.expert_count": 8}, "llama.expert_count", "8"),
    ({"llama.attention.value_length": 8}, "llama.attention.value_length", "8"),
    ({"llama.rope.dimension_count": 8}, "llama.rope.dimension_count", "partial RoPE"),
]


@pytest.mark.parametrize("meta,key,detail", GGUF_REFUSALS, ids=[k for _, k, _ in GGUF_REFUSALS])
def test_gguf_key_that_changes_the_maths_is_refused(tmp_path, meta, key, detail):
    path = _tiny_gguf(tmp_path, extra_meta=meta)
    message = expect_format_error(load_model, path, key, detail)
    assert "fetch-model" not in message
    with pytest.raises(UnsupportedModel):
        load_model(path)


def test_gguf_unknown_tensor_is_refused(tmp_path):
    d = tiny_gguf_metadata()["llama.embedding_length"]
    path = _tiny_gguf(tmp_path, extra_tensors={"blk.0.attn_q.bias": (np.ones(d), "F32")})
    expect_format_error(load_model, path, "unknown tensor blk.0.attn_q.bias", "llama")


def test_llama3_scaling_equals_the_divisors_llama_cpp_stored():
    """Two independent encodings of the same scaling: transformers' formula from
    config.json and the per-pair divisors llama.cpp's converter wrote into the GGUF."""
    config = json.loads((FAMILIES_DIR / "llama32-tiny" / "model" / "config.json").read_text())
    params = config["rope_scaling"]
    scaling = Llama3RopeScaling(factor=params["factor"],
                                low_freq_factor=params["low_freq_factor"],
                                high_freq_factor=params["high_freq_factor"],
                                original_max_positions=params["original_max_position_embeddings"])
    plain = rope.plain_inv_freq(config["head_dim"], config["rope_theta"])             # [hd/2]
    scaled = rope.llama3_inv_freq(plain, scaling)                                      # [hd/2]
    gguf = GGUFFile(FAMILIES_DIR / "llama32-tiny" / "llama32-tiny.Q8_0.gguf")
    divisors = gguf.tensor("rope_freqs.weight")                                        # [hd/2]
    np.testing.assert_allclose(plain / scaled, divisors, rtol=1e-5)
    assert math.isclose(float(divisors.max()), params["factor"])
