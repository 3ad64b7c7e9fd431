"""Gemma 3 from a Hugging Face safetensors folder answers exactly as from its GGUF.

The oracle has no Gemma folder, so the tests write one: a small random Gemma 3 (7 layers:
llama.cpp's 5 sliding : 1 global pattern, a window of WINDOW_TOKENS shorter than the
prompts) saved twice with the same weights -- as transformers saves it (config.json
`gemma3_text`, RMSNorm weights `w` of Gemma's `1 + w`, Gemma's norm names) and as
llama.cpp's converter writes it (the norms stored as float32 `1 + w`, GGUF names). Every
extra weight is away from its neutral value, so a folder read that skipped the `+ 1`, mixed
up `post_attention_layernorm` (after attention in Gemma, the MLP's pre-norm in Llama) or
the local RoPE base would change the logits. The real Gemma 3 270M GGUF, dequantised and
written out as a folder, is checked against the GGUF and the Hugging Face oracle.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.model import llama
from engine.model.loader import load_gguf_weights, load_model
from engine.model.spec import LlamaWeights, ModelConfig
from tests.formats_writers import write_gguf, write_safetensors

VOCAB, D, FF, HEADS, KV_HEADS, HEAD_DIM = 257, 32, 64, 4, 1, 16
NUM_LAYERS = 7                      # layers 0-4 and 6 slide, layer 5 is global
WINDOW_TOKENS = 8
ROPE_THETA, LOCAL_ROPE_THETA = 1e6, 10_000.0    # the GGUF's base; its implicit local one
NORM_SPREAD = 0.3                   # HF norm weights w ~ NORM_SPREAD * N(0, 1): 1 + w != 1
EXACT = 1e-5                        # folder logits vs GGUF logits (same float32 maths)
PROMPT = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64, 33, 83, 27, 95, 2, 88, 41, 97]
GREEDY_TOKENS = 12
# Gemma's HF layer names -> llama.cpp's (the GGUF's) per layer
GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
         "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm")


def _layer_types(num_layers: int) -> list[str]:
    return ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
            for i in range(num_layers)]


def _hf_config(**over) -> dict:
    """config.json as transformers writes it for a Gemma3ForCausalLM (text) model."""
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "vocab_size": VOCAB, "hidden_size": D, "intermediate_size": FF,
            "num_hidden_layers": NUM_LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "rms_norm_eps": 1e-6,
            "rope_theta": ROPE_THETA, "rope_local_base_freq": LOCAL_ROPE_THETA,
            "sliding_window": WINDOW_TOKENS, "layer_types": _layer_types(NUM_LAYERS),
            "query_pre_attn_scalar": HEAD_DIM, "hidden_activation": "gelu_pytorch_tanh",
            "tie_word_embeddings": True, "rope_scaling": None, "attn_logit_softcapping": None,
            "final_logit_softcapping": None, "max_position_embeddings": 512,
            "bos_token_id": 2, "eos_token_id": 1, **over}


def _random_hf_tensors(seed: int = 7) -> dict[str, np.ndarray]:
    """Gemma 3's tensors, HF names, output-major [out, in], norms as HF stores them (w)."""
    rng = np.random.default_rng(seed)

    def mat(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / math.sqrt(inp)).astype(np.float32)

    def norm(size: int) -> np.ndarray:
        return (NORM_SPREAD * rng.standard_normal(size)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": (rng.standard_normal((VOCAB, D)) / math.sqrt(D)
                                             ).astype(np.float32),
               "model.norm.weight": norm(D)}
    for i in range(NUM_LAYERS):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": mat(HEADS * HEAD_DIM, D),
                    p + "self_attn.k_proj.weight": mat(KV_HEADS * HEAD_DIM, D),
                    p + "self_attn.v_proj.weight": mat(KV_HEADS * HEAD_DIM, D),
                    p + "self_attn.o_proj.weight": mat(D, HEADS * HEAD_DIM),
                    p + "mlp.gate_proj.weight": mat(FF, D), p + "mlp.up_proj.weight": mat(FF, D),
                    p + "mlp.down_proj.weight": mat(D, FF),
                    p + "self_attn.q_norm.weight": norm(HEAD_DIM),
                    p + "self_attn.k_norm.weight": norm(HEAD_DIM)}
        tensors |= {p + f"{n}.weight": norm(D) for n in NORMS if "self_attn" not in n}
    return tensors


def _gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    _, _, layer, rest = hf_name.split(".", 3)
    return f"blk.{layer}.{GGUF_LAYER_NAMES[rest.removesuffix('.weight')]}.weight"


def _is_norm(hf_name: str) -> bool:
    return hf_name == "model.norm.weight" or any(f".{n}." in hf_name for n in NORMS)


def write_folder(folder, tensors: dict[str, np.ndarray], config: dict):
    """A loadable HF folder: config.json, model.safetensors, the byte tokenizer's config."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "ByteTokenizer"}), encoding="utf-8")
    write_safetensors(folder / "model.safetensors", tensors)
    return folder


def write_gemma_gguf(path, tensors: dict[str, np.ndarray]):
    """The same weights as llama.cpp's converter stores them: norms as float32 1 + w."""
    meta = {"general.architecture": "gemma3", "gemma3.block_count": NUM_LAYERS,
            "gemma3.context_length": 512, "gemma3.embedding_length": D,
            "gemma3.feed_forward_length": FF, "gemma3.attention.head_count": HEADS,
            "gemma3.attention.head_count_kv": KV_HEADS, "gemma3.attention.key_length": HEAD_DIM,
            "gemma3.attention.value_length": HEAD_DIM, "gemma3.rope.freq_base": ROPE_THETA,
            "gemma3.attention.layer_norm_rms_epsilon": 1e-6,
            "gemma3.attention.sliding_window": WINDOW_TOKENS}
    stored = {_gguf_name(n): ((w + np.float32(1)).astype(np.float32) if _is_norm(n) else w, "F32")
              for n, w in tensors.items()}
    return write_gguf(path, meta, stored)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(folder model, GGUF config, GGUF weights) of the same random Gemma 3."""
    tmp = tmp_path_factory.mktemp("gemma3")
    tensors = _random_hf_tensors()
    folder = load_model(write_folder(tmp / "folder", tensors, _hf_config()))
    config, weights = load_gguf_weights(write_gemma_gguf(tmp / "g.gguf", tensors))
    return folder, config, weights


def test_the_folder_reads_as_the_ggufs_gemma3_options(pair):
    folder, gguf_config, _ = pair
    assert folder.config.options == gguf_config.options
    assert [folder.config.layer_rope_theta(i) for i in (4, 5)] == [LOCAL_ROPE_THETA, ROPE_THETA]
    assert folder.config.tie_word_embeddings and folder.config.options.sliding_window == 8


def test_folder_logits_equal_the_ggufs(pair):
    """Every position of a prompt longer than the window (so the local layers hide keys)."""
    folder, config, weights = pair
    assert len(PROMPT) > WINDOW_TOKENS
    got = llama.forward(folder.config, folder.weights, PROMPT)                   # [n, V]
    want = llama.forward(config, weights, PROMPT)                                # [n, V]
    assert float(np.max(np.abs(got - want))) <= EXACT
    assert float(np.max(np.abs(folder.weights.layers[0].attn_norm - 1))) > 0.1   # not neutral


def test_folder_dense_greedy_equals_the_ggufs(pair):
    folder, config, weights = pair
    got = list(llama.generate(folder.config, folder.weights, PROMPT, max_new_tokens=GREEDY_TOKENS))
    want = list(llama.generate(config, weights, PROMPT, max_new_tokens=GREEDY_TOKENS))
    assert got == want and len(got) == GREEDY_TOKENS


def test_multimodal_layout_reads_the_same_weights(tmp_path, pair):
    """Gemma3ForConditionalGeneration: a `gemma3` config whose text_config holds only what
    differs from transformers' defaults, weights under `model.language_model.`."""
    folder, _, _ = pair
    full = _hf_config()
    text = {k: full[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                 "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "sliding_window",
                                 "query_pre_attn_scalar", "layer_types")}
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {**text, "model_type": "gemma3_text"}, "eos_token_id": [1, 106]}
    tensors = {n.replace("model.", "model.language_model.", 1): w
               for n, w in _random_hf_tensors().items()}
    model = load_model(write_folder(tmp_path / "mm", tensors, config))
    assert model.config.options == folder.config.options
    assert set(model.config.eos_token_ids) == {1, 106}
    got = llama.forward(model.config, model.weights, PROMPT)
    assert float(np.max(np.abs(got - llama.forward(folder.config, folder.weights, PROMPT)))) == 0


GEMMA_REFUSALS = [
    ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping", "50.0"),
    ({"final_logit_softcapping": 30.0}, "final_logit_softcapping", "30.0"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 8.0}}, "rope_scaling.rope_type",
     "dynamic"),
    ({"rope_parameters": {"full_attention": {"rope_type": "default"},
                          "sliding_attention": {"rope_type": "linear", "factor": 8.0}}},
     "rope_parameters.sliding_attention.rope_type", "linear"),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0},
                          "sliding_attention": {"rope_type": "default"}}},
     "rope_parameters.full_attention.rope_type", "yarn"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor", "0.5"),
    ({"hidden_activation": "gelu"}, "hidden_activation", "gelu"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention", "True"),
    ({"layer_types": ["chunked_attention"] * NUM_LAYERS}, "layer_types", "chunked_attention"),
    ({"attention_bias": True}, "attention_bias", "biases"),
]


@pytest.mark.parametrize("edits,key,detail", GEMMA_REFUSALS, ids=[k for _, k, _ in GEMMA_REFUSALS])
def test_gemma_key_that_changes_the_maths_is_refused(tmp_path, edits, key, detail):
    from engine.errors import UnsupportedModel
    folder = write_folder(tmp_path / "g", _random_hf_tensors(), _hf_config(**edits))
    with pytest.raises(UnsupportedModel) as info:
        load_model(folder)
    message = str(info.value)
    assert str(folder / "config.json") in message and key in message and detail in message


def test_a_vision_tower_is_refused(tmp_path):
    """A Gemma3ForConditionalGeneration folder with its vision config, and one whose config
    lost it but whose file still holds the tower's tensors."""
    from engine.errors import UnsupportedModel
    config = {"model_type": "gemma3", "text_config": _hf_config(),
              "vision_config": {"model_type": "siglip_vision_model"}}
    folder = write_folder(tmp_path / "mm", _random_hf_tensors(), config)
    with pytest.raises(UnsupportedModel, match="vision_config"):
        load_model(folder)
    tower = {"vision_tower.vision_model.post_layernorm.weight": np.ones(4, np.float32)}
    folder = write_folder(tmp_path / "tower", _random_hf_tensors() | tower, _hf_config())
    with pytest.raises(UnsupportedModel, match="unknown tensor vision_tower"):
        load_model(folder)


def _config_of(tmp_path, config: dict) -> ModelConfig:
    return load_model(write_folder(tmp_path / "c", _random_hf_tensors(), config)).config


def test_older_and_newer_config_forms_read_the_same(tmp_path, pair):
    """transformers 4.50's `sliding_window_pattern` (every 6th layer global, its default)
    and 5's `rope_parameters` per layer type give the options `layer_types` gives."""
    folder, _, _ = pair
    older = _hf_config(layer_types=None, sliding_window_pattern=6)
    assert _config_of(tmp_path / "a", older).options == folder.config.options
    newer = _hf_config(rope_theta=None, rope_local_base_freq=None, rope_parameters={
        "full_attention": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_ROPE_THETA}})
    assert _config_of(tmp_path / "b", newer) == folder.config


def test_query_pre_attn_scalar_sets_the_attention_scale(tmp_path):
    """Gemma 3 27B's scalar (168) is not its head_dim (128): scores x scalar**-0.5."""
    config = _config_of(tmp_path, _hf_config(query_pre_attn_scalar=4 * HEAD_DIM))
    assert config.attn_scale == pytest.approx((4 * HEAD_DIM) ** -0.5) != HEAD_DIM ** -0.5


GEMMA3_27B_META = {"general.architecture": "gemma3", "gemma3.block_count": 62,
                   "gemma3.embedding_length": 5376, "gemma3.attention.head_count": 32,
                   "gemma3.attention.key_length": 128, "gemma3.attention.value_length": 128,
                   "gemma3.attention.sliding_window": 1024}


@pytest.mark.parametrize("layers,scale", [(62, 168 ** -0.5), (26, None), (18, None)])
def test_a_gemma3_gguf_scales_scores_as_its_folder_would(layers, scale):
    """The GGUF has no query_pre_attn_scalar: the 27B (62 layers) scales by
    (hidden / heads)**-0.5 = 168**-0.5, as its config.json says; the others by head_dim."""
    from engine.model.families import options_from_gguf
    options = options_from_gguf({**GEMMA3_27B_META, "gemma3.block_count": layers}, "m.gguf")
    assert options.attn_scale == (pytest.approx(scale) if scale else None)


# --- the real Gemma 3 270M, its GGUF written out as a folder -------------------------------

ORACLE_TOLERANCE = 1e-3             # as tests/engine/model/test_gemma3.py (README: ~2e-5)


def _hf_tensors_of(config: ModelConfig, weights: LlamaWeights) -> dict[str, np.ndarray]:
    """Loaded weights (fused, input-major, norms 1 + w) -> HF tensors ([out, in], norms w)."""
    q, kv, ff = config.q_size, config.kv_size, config.intermediate_size
    tensors = {"model.embed_tokens.weight": weights.embed,
               "model.norm.weight": weights.final_norm - np.float32(1)}
    for i, layer in enumerate(weights.layers):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": layer.wqkv[:, :q].T,
                    p + "self_attn.k_proj.weight": layer.wqkv[:, q:q + kv].T,
                    p + "self_attn.v_proj.weight": layer.wqkv[:, q + kv:].T,
                    p + "self_attn.o_proj.weight": layer.wo.T,
                    p + "mlp.gate_proj.weight": layer.w_gate_up[:, :ff].T,
                    p + "mlp.up_proj.weight": layer.w_gate_up[:, ff:].T,
                    p + "mlp.down_proj.weight": layer.w_down.T}
        norms = {"input_layernorm": layer.attn_norm, "pre_feedforward_layernorm": layer.mlp_norm,
                 "post_attention_layernorm": layer.post_attn_norm,
                 "post_feedforward_layernorm": layer.post_mlp_norm,
                 "self_attn.q_norm": layer.q_norm, "self_attn.k_norm": layer.k_norm}
        tensors |= {p + f"{n}.weight": w - np.float32(1) for n, w in norms.items()}
    return tensors


def _hf_config_of(config: ModelConfig) -> dict:
    options = config.options
    return _hf_config(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim, rms_norm_eps=config.rms_norm_eps,
        rope_theta=config.rope_theta, rope_local_base_freq=options.local_rope_theta,
        sliding_window=options.sliding_window, query_pre_attn_scalar=config.head_dim,
        layer_types=["sliding_attention" if s else "full_attention"
                     for s in options.sliding_layers],
        max_position_embeddings=config.max_position_embeddings)


@pytest.mark.real_model
def test_real_gemma_as_a_folder_answers_as_its_gguf_and_hugging_face(tmp_path):
    from cli.fetch import GEMMA, ensure_model
    from tests.oracle import ORACLE_DIR, REPO_ROOT
    gguf = ensure_model(REPO_ROOT / GEMMA.default_dest, model=GEMMA.name) / GEMMA.gguf_name
    config, weights = load_gguf_weights(gguf)
    folder = write_folder(tmp_path / "gemma-3-270m", _hf_tensors_of(config, weights),
                          _hf_config_of(config))
    model = load_model(folder)
    assert model.config.options == config.options
    oracle = ORACLE_DIR / "families" / "gemma3-270m"
    with open(oracle / "logits_cases.jsonl", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for j, case in enumerate(cases):          # logits_1: 724 tokens, past the 512 window
        ids = case["prompt_ids"]
        got = llama.logits_from_hidden(
            model.weights, llama.hidden_states(model.config, model.weights, ids)[-1:])[0]
        want = llama.logits_from_hidden(weights, llama.hidden_states(config, weights, ids)[-1:])[0]
        assert float(np.max(np.abs(got - want))) <= EXACT, f"logits_{j} vs the GGUF"
        hf = np.load(oracle / f"logits_{j}.npy")                                   # [V]
        assert float(np.max(np.abs(got - hf))) <= ORACLE_TOLERANCE, f"logits_{j} vs HF"


LINEAR_FACTOR = 8.0                 # Gemma 3 4B+'s rope_scaling on its global layers


def test_linear_rope_scaling_divides_only_the_global_layers_frequencies(tmp_path, pair):
    """transformers' "linear" type (`inv_freq /= factor`) on full-attention layers, in its
    4.x (`rope_scaling`) and 5.x (`rope_parameters.full_attention`) spellings."""
    from engine.model import rope
    folder, _, _ = pair
    older = _config_of(tmp_path / "a", _hf_config(
        rope_scaling={"rope_type": "linear", "factor": LINEAR_FACTOR}))
    newer = _config_of(tmp_path / "b", _hf_config(rope_theta=None, rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": LINEAR_FACTOR,
                           "rope_theta": ROPE_THETA},
        "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_ROPE_THETA}}))
    assert older == newer and older.options.global_rope_linear_factor == LINEAR_FACTOR
    positions = np.arange(40)
    tables = llama.rope_per_layer(older, positions)                 # [(cos, sin) [n, hd/2]]
    scaled = rope.plain_inv_freq(HEAD_DIM, ROPE_THETA) / np.float32(LINEAR_FACTOR)
    local = rope.plain_inv_freq(HEAD_DIM, LOCAL_ROPE_THETA)
    for layer, (cos, sin) in enumerate(tables):
        want_cos, want_sin = rope.cos_sin(positions, local if layer != 5 else scaled)
        assert np.array_equal(cos, want_cos) and np.array_equal(sin, want_sin), layer
    got = llama.forward(older, folder.weights, PROMPT)[-1]
    assert float(np.max(np.abs(got - llama.forward(folder.config, folder.weights, PROMPT)[-1]))) > 1e-3
