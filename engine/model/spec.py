"""The shape of a loaded model: its hyper-parameters, its float32 weights and the `Model` handle.

Every file format (GGUF, Hugging Face safetensors) is converted at load time into these
plain dataclasses, so the forward pass (`engine/model/llama.py`) and the paged runner never know
where the numbers came from. Conventions fixed here, once:

* weights are float32 numpy arrays laid out *input-major*, so a layer is `x @ W`
  (`x: [n, in]`, `W: [in, out]`);
* Q and K rows use Hugging Face's rotate-half RoPE convention (a GGUF's adjacent-pair
  permutation is undone by the loader);
* Q, K and V are fused into one matrix, and so are the MLP's gate and up projections, so a
  step does one matmul per weight (the columns are [q | k | v] and [gate | up]).

Even the `succ` bigram test model is a Llama here: zero layers, an identity embedding and a
shifted LM head (see `tests/models.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Hyper-parameters of a Llama-architecture decoder."""
    vocab_size: int
    hidden_size: int                # d
    intermediate_size: int          # ff
    num_layers: int
    num_heads: int                  # H (query heads)
    num_kv_heads: int               # KV heads (grouped-query attention: H % KV == 0)
    head_dim: int                   # hd (H * hd need not equal d)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    @property
    def q_size(self) -> int:        # columns of Q in the fused QKV matrix
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:       # columns of K (and of V) in the fused QKV matrix
        return self.num_kv_heads * self.head_dim


@dataclass(frozen=True, kw_only=True)
class LayerWeights:
    """One transformer block, float32, input-major (`x @ W`)."""
    attn_norm: np.ndarray           # [d]
    wqkv: np.ndarray                # [d, H*hd + 2*KV*hd]   columns: q | k | v (rotate-half rows)
    wo: np.ndarray                  # [H*hd, d]
    mlp_norm: np.ndarray            # [d]
    w_gate_up: np.ndarray           # [d, 2*ff]             columns: gate | up
    w_down: np.ndarray              # [ff, d]


@dataclass(frozen=True, kw_only=True)
class LlamaWeights:
    embed: np.ndarray               # [V, d]   token embedding rows
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray          # [d]
    lm_head: np.ndarray             # [d, V]   (tied: embed.T, a view, no copy)


@dataclass(kw_only=True)
class Model:
    """A loaded model: what `engine.load_model(model_dir)` returns.

    `tokenizer` offers encode/decode/token_bytes, `.eos_token_ids`, `.bos_token`/`.eos_token`;
    `chat_template` is the model's Jinja source (None: it shipped none) and `template` its
    parsed form (parsed once at load, so a broken template fails here, never on a request).
    """
    name: str
    config: ModelConfig
    weights: LlamaWeights
    tokenizer: Any
    chat_template: str | None = None    # the model's own template source (None: none shipped)
    template: Any = None                # the parsed `template.Template` the server renders with:
                                        # the model's own, else template.DEFAULT_TEMPLATE
    source_path: str = ""
    extra: dict = field(default_factory=dict)

    def render_chat(self, messages, *, add_generation_prompt: bool = True) -> str:
        """Messages -> prompt text through `template`, with the tokenizer's BOS/EOS strings.

        A tokenizer without a BOS or EOS string gives "" for it. Template errors propagate.
        """
        tok = self.tokenizer
        return self.template.render_chat(
            [dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
            bos_token=tok.bos_token or "", eos_token=tok.eos_token or "")

    def forward(self, ids) -> np.ndarray:
        """Dense reference forward: token ids [n] -> logits [n, V] (float32)."""
        from engine.model import llama
        return llama.forward(self.config, self.weights, ids)

    def hidden_states(self, ids) -> np.ndarray:
        """Token ids [n] -> final-normed hidden states [n, d] (float32)."""
        from engine.model import llama
        return llama.hidden_states(self.config, self.weights, ids)
