"""load_model: both layouts, the test models, Q/K order, templates, names and broken inputs."""
from __future__ import annotations

import json
import shutil
from functools import partial

import numpy as np
import pytest

from engine.model.loader import load_model
from engine.formats.quants import GGML_TYPE_BY_NAME, dequantize
from engine.formats.safetensors import SafetensorsFile
from engine.model.weights import permute_rows, unpermute_order
from tests import models
from tests.formats_writers import write_gguf, write_safetensors
from tests.engine.formats.format_errors import expect_format_error
from tests.engine.core.engine_models import logits_of
from tests.oracle import HF_DIR, ORACLE_DIR, read_jsonl
from tests.quantize import QUANTIZERS


# --- succ ------------------------------------------------------------------------------

def test_succ_model_is_a_zero_layer_llama_with_a_byte_tokenizer(succ_model_dir):
    m = load_model(succ_model_dir)
    assert m.name == "succ"
    assert m.config.num_layers == 0 and m.config.vocab_size == 257
    assert m.config.eos_token_ids == (256,)
    assert m.chat_template == "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert m.tokenizer.encode("a") == [97]
    assert m.tokenizer.encode("<|endoftext|>") == [256]


def test_succ_greedy_is_the_next_byte_and_sampling_is_not_degenerate(succ_model_dir):
    m = load_model(succ_model_dir)
    ids = [97, 98, 255, 0, 256]
    logits = logits_of(m, ids)                                      # [5, 257]
    assert logits.argmax(axis=1).tolist() == [98, 99, 0, 1, 0]
    top2 = np.sort(logits, axis=1)[:, -2:]
    assert np.all(top2[:, 1] - top2[:, 0] > 3.0)                 # greedy is unambiguous
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    assert np.all((p.max(axis=1) > 0.3) & (p.max(axis=1) < 0.9))  # seeds give other bytes
    assert np.all(p[:, 256] < 1e-6)                              # sampling does not stop


# --- tiny Llama, HF layout -------------------------------------------------------------

def test_tiny_llama_hf_config_and_layout(tiny_llama_dir):
    m = load_model(tiny_llama_dir)
    c = m.config
    assert m.name == "tiny-llama" and m.extra["format"] == "safetensors"
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
            c.intermediate_size, c.rope_theta, c.max_position_embeddings) == \
           (2, 64, 4, 2, 16, 128, 10000.0, 512)
    assert c.vocab_size == len(models.tiny_vocab()) and c.tie_word_embeddings is False
    assert c.eos_token_ids == (c.vocab_size - 1,)
    assert m.chat_template is None
    layer = m.weights.layers[1]
    assert layer.wqkv.shape == (64, 64 + 32 + 32) and layer.wqkv.flags.c_contiguous
    assert layer.w_gate_up.shape == (64, 256) and layer.w_down.shape == (128, 64)
    assert m.weights.lm_head.shape == (64, c.vocab_size)


def test_tiny_llama_hf_weights_are_the_written_ones_input_major(tiny_llama_dir):
    t = models.tiny_llama_tensors()
    w = load_model(tiny_llama_dir).weights
    p = "model.layers.1."
    expected_qkv = np.concatenate([t[p + "self_attn.q_proj.weight"], t[p + "self_attn.k_proj.weight"],
                                   t[p + "self_attn.v_proj.weight"]]).T
    assert np.array_equal(w.layers[1].wqkv, expected_qkv)
    expected_gate_up = np.concatenate([t[p + "mlp.gate_proj.weight"], t[p + "mlp.up_proj.weight"]]).T
    assert np.array_equal(w.layers[1].w_gate_up, expected_gate_up)
    assert np.array_equal(w.layers[1].wo, t[p + "self_attn.o_proj.weight"].T)
    assert np.array_equal(w.lm_head, t["lm_head.weight"].T)
    assert np.array_equal(w.embed, t["model.embed_tokens.weight"])


def test_tiny_llama_greedy_next_token_depends_on_the_prompt(tiny_llama_dir):
    m = load_model(tiny_llama_dir)
    prompts = [[1, 2, 3], [50, 60], [100, 101, 102], [7], [200, 10, 30], [33, 33, 33]]
    assert len({int(logits_of(m, ids)[-1].argmax()) for ids in prompts}) >= 4


def test_tiny_llama_tokenizer_applies_merges(tiny_llama_dir):
    tok = load_model(tiny_llama_dir).tokenizer
    vocab = models.tiny_vocab()
    assert tok.encode(" the") == [vocab.index("Ġthe")]
    assert tok.decode(tok.encode("in the<|endoftext|>")) == "in the<|endoftext|>"


# --- tiny Llama, GGUF ------------------------------------------------------------------

def test_permutation_by_hand():
    w = np.arange(8, dtype=np.float32)[:, None]                 # 2 heads, head_dim 4
    assert permute_rows(w, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert np.array_equal(permute_rows(w, 2)[unpermute_order(8, 2)], w)     # as the loader reads them


def _dequantized(hf_name: str) -> np.ndarray:
    """What the GGUF holds for a tensor, in HF's row order: quantize, dequantize."""
    w = models.tiny_llama_tensors()[hf_name]
    qtype = models.gguf_type(hf_name)
    raw = QUANTIZERS[qtype](w)
    return dequantize(raw, GGML_TYPE_BY_NAME[qtype], w.size).reshape(w.shape)


def test_tiny_llama_gguf_weights_equal_the_dequantized_values(tiny_llama_gguf):
    m = load_model(tiny_llama_gguf)
    assert m.extra["format"] == "gguf" and m.name == "tiny-llama-gguf"
    for i, layer in enumerate(m.weights.layers):
        p = f"model.layers.{i}."
        qkv = np.concatenate([_dequantized(p + "self_attn.q_proj.weight"),
                              _dequantized(p + "self_attn.k_proj.weight"),
                              _dequantized(p + "self_attn.v_proj.weight")]).T
        assert np.array_equal(layer.wqkv, qkv)
        gate_up = np.concatenate([_dequantized(p + "mlp.gate_proj.weight"),
                                  _dequantized(p + "mlp.up_proj.weight")]).T
        assert np.array_equal(layer.w_gate_up, gate_up)
        assert np.array_equal(layer.wo, _dequantized(p + "self_attn.o_proj.weight").T)
        assert np.array_equal(layer.w_down, _dequantized(p + "mlp.down_proj.weight").T)
        assert np.array_equal(layer.attn_norm, models.tiny_llama_tensors()[p + "input_layernorm.weight"])
    assert np.array_equal(m.weights.embed, _dequantized("model.embed_tokens.weight"))
    assert np.array_equal(m.weights.lm_head, _dequantized("lm_head.weight").T)


def test_tiny_llama_gguf_config_and_tokenizer_match_the_hf_copy(tiny_llama_gguf, tiny_llama_dir):
    g, h = load_model(tiny_llama_gguf), load_model(tiny_llama_dir)
    assert g.config.rms_norm_eps == pytest.approx(h.config.rms_norm_eps, rel=1e-6)
    for field in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                  "head_dim", "intermediate_size", "rope_theta", "max_position_embeddings",
                  "eos_token_ids", "tie_word_embeddings"):
        assert getattr(g.config, field) == getattr(h.config, field), field
    for text in ("the thin rein", " a  then<|endoftext|>x", "héllo 12"):
        assert g.tokenizer.encode(text) == h.tokenizer.encode(text)


def test_tiny_llama_gguf_logits_match_within_quantization_error(tiny_llama_gguf, tiny_llama_dir,
                                                               tmp_path):
    ids = [5, 80, 116, 257, 30, 1, 99]
    g = logits_of(load_model(tiny_llama_gguf), ids)
    # the HF layout holding the dequantized values must agree to float32 rounding ...
    directory = tmp_path / "deq"
    shutil.copytree(tiny_llama_dir, directory)
    write_safetensors(directory / "model.safetensors",
                      {n: _dequantized(n) for n in models.tiny_llama_tensors()})
    assert np.allclose(g, logits_of(load_model(directory), ids), atol=1e-4)
    # ... and the original float weights within the Q8_0/Q4_1 error
    h = logits_of(load_model(tiny_llama_dir), ids)
    assert np.corrcoef(g.ravel(), h.ravel())[0, 1] > 0.95
    assert np.abs(g - h).max() < 0.25 * np.abs(h).max()


@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "F16"])
def test_uniformly_typed_gguf_fuses_packed_rows_exactly(tmp_path, qtype):
    t = models.tiny_llama_tensors()
    tensors = models.tiny_gguf_tensors(lambda name: qtype if t[name].ndim == 2 else "F32")
    (tmp_path / "u").mkdir()
    m = load_model(write_gguf(tmp_path / "u" / "u.gguf", models.tiny_gguf_metadata(), tensors))

    def deq(name):
        w = t[name]
        return dequantize(QUANTIZERS[qtype](w), GGML_TYPE_BY_NAME[qtype], w.size).reshape(w.shape)
    p = "model.layers.0."
    qkv = np.concatenate([deq(p + "self_attn.q_proj.weight"), deq(p + "self_attn.k_proj.weight"),
                          deq(p + "self_attn.v_proj.weight")]).T
    assert np.array_equal(m.weights.layers[0].wqkv, qkv)
    gate_up = np.concatenate([deq(p + "mlp.gate_proj.weight"), deq(p + "mlp.up_proj.weight")]).T
    assert np.array_equal(m.weights.layers[0].w_gate_up, gate_up)
    assert np.array_equal(m.weights.lm_head, deq("lm_head.weight").T)


def test_gguf_without_output_weight_ties_the_lm_head(tmp_path):
    tensors = {models.gguf_name(n): (w, "F32") for n, w in models.tiny_llama_tensors().items()
               if n != "lm_head.weight"}
    (tmp_path / "tied").mkdir()
    m = load_model(write_gguf(tmp_path / "tied" / "t.gguf", models.tiny_gguf_metadata(), tensors))
    assert m.config.tie_word_embeddings is True
    assert np.shares_memory(m.weights.lm_head, m.weights.embed)
    assert np.array_equal(m.weights.lm_head, m.weights.embed.T)


# --- templates, names, eos ---------------------------------------------------------------

@pytest.fixture
def tiny_copy(tiny_llama_dir, tmp_path):
    return shutil.copytree(tiny_llama_dir, tmp_path / "copy")


def _edit_json(path, **changes):
    value = json.loads(path.read_text()) if path.exists() else {}
    value.update(changes)
    path.write_text(json.dumps(value))


def test_chat_template_precedence(tiny_copy):
    (tiny_copy / "chat_template.jinja").write_text("J")
    assert load_model(tiny_copy).chat_template == "J"
    _edit_json(tiny_copy / "tokenizer_config.json", chat_template="T")
    assert load_model(tiny_copy).chat_template == "T"
    _edit_json(tiny_copy / "generation_config.json", chat_template="G")
    assert load_model(tiny_copy).chat_template == "G"


def test_named_template_list_uses_default(tiny_copy):
    _edit_json(tiny_copy / "tokenizer_config.json",
               chat_template=[{"name": "tool_use", "template": "X"},
                              {"name": "default", "template": "D"}])
    assert load_model(tiny_copy).chat_template == "D"


def test_gguf_template_from_metadata_unless_a_side_file_exists(tmp_path):
    directory = tmp_path / "with-template"
    directory.mkdir()
    meta = {**models.tiny_gguf_metadata(), "tokenizer.chat_template": "FROM-GGUF"}
    tensors = {models.gguf_name(n): (w, "F32") for n, w in models.tiny_llama_tensors().items()}
    path = write_gguf(directory / "m.gguf", meta, tensors)
    assert load_model(path).chat_template == "FROM-GGUF"
    assert load_model(directory).chat_template == "FROM-GGUF"
    (directory / "chat_template.jinja").write_text("SIDE")
    assert load_model(directory).chat_template == "SIDE"


def test_eos_ids_are_the_union_and_rope_parameters_accepted(tiny_copy):
    _edit_json(tiny_copy / "generation_config.json", eos_token_id=[7, 3])
    cfg = json.loads((tiny_copy / "config.json").read_text())
    del cfg["rope_theta"]
    cfg["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "default"}
    (tiny_copy / "config.json").write_text(json.dumps(cfg))
    m = load_model(tiny_copy)
    assert m.config.eos_token_ids == (3, 7, m.config.vocab_size - 1)
    assert m.config.rope_theta == 500000.0


def test_version_folder_is_skipped_in_the_name(tiny_llama_dir, tmp_path):
    target = shutil.copytree(tiny_llama_dir, tmp_path / "my-model" / "v3")
    assert load_model(target).name == "my-model"


# --- broken inputs ---------------------------------------------------------------------

_expect = partial(expect_format_error, load_model)


def test_not_a_model(tmp_path):
    _expect(tmp_path / "missing", "no such file")
    (tmp_path / "empty").mkdir()
    _expect(tmp_path / "empty", "not a model directory")
    (tmp_path / "x.bin").write_bytes(b"1")
    _expect(tmp_path / "x.bin", "not a .gguf")


def test_directory_with_two_ggufs(tiny_llama_gguf, tmp_path):
    for name in ("a.gguf", "b.gguf"):
        shutil.copy(tiny_llama_gguf, tmp_path / name)
    _expect(tmp_path, "several .gguf files", "a.gguf")


def test_missing_tensor_is_named(tiny_copy):
    st = SafetensorsFile(tiny_copy / "model.safetensors")
    kept = {n: st.tensor(n).copy() for n in st.names() if n != "model.layers.1.mlp.up_proj.weight"}
    del st
    write_safetensors(tiny_copy / "model.safetensors", kept)
    _expect(tiny_copy, str(tiny_copy), "missing tensor model.layers.1.mlp.up_proj.weight")


def test_shape_that_contradicts_the_config(tiny_copy):
    _edit_json(tiny_copy / "config.json", intermediate_size=96)
    _expect(tiny_copy, "model.layers.0.mlp.gate_proj.weight", "shape [128, 64]", "[96, 64]")


def test_bad_config_json_and_missing_key(tiny_copy):
    (tiny_copy / "config.json").write_text("{not json")
    _expect(tiny_copy, "config.json", "not valid JSON")
    (tiny_copy / "config.json").write_text(json.dumps({"hidden_size": 64}))
    _expect(tiny_copy, "config.json", "missing config key")


def test_truncated_safetensors_in_a_model_dir(tiny_copy):
    path = tiny_copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    _expect(tiny_copy, "model.safetensors", "past the end")


def test_truncated_gguf(tiny_llama_gguf, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(tiny_llama_gguf.read_bytes()[:-1000])
    _expect(bad, "bad.gguf", "past the end")
    bad.write_bytes(tiny_llama_gguf.read_bytes()[:300])
    _expect(bad, "bad.gguf", "truncated")


def test_bad_tokenizer_json(tiny_copy):
    (tiny_copy / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram"}}))
    _expect(tiny_copy, "tokenizer.json", "bad tokenizer")


# --- the real model --------------------------------------------------------------------

@pytest.mark.real_model
def test_real_model_loads_and_matches_reference_logits(real_model):
    m = real_model
    hf = json.loads((HF_DIR / "config.json").read_text())
    c = m.config
    assert m.name == "smol-135m"
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim,
            c.intermediate_size, c.vocab_size, c.rope_theta, c.bos_token_id) == \
           (hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"],
            hf["num_key_value_heads"], hf["head_dim"], hf["intermediate_size"],
            hf["vocab_size"], hf["rope_theta"], hf["bos_token_id"])
    assert c.eos_token_ids == (2,) and c.tie_word_embeddings
    assert m.chat_template == (HF_DIR / "chat_template.jinja").read_text()
    case = read_jsonl("hf_greedy.jsonl")[0]
    logits = logits_of(m, case["prompt_ids"])[-1]
    assert np.abs(logits - np.load(ORACLE_DIR / "logits_0.npy")).max() < 1e-3
