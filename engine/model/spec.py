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

The families served (Llama 2/3.x, Qwen2, Qwen3, Gemma 3) are ONE decoder: what differs
between them is a `FamilyOptions` value in the config (q/k/v biases, per-head q/k RMSNorm,
Llama 3 RoPE scaling, per-pair RoPE divisors from a GGUF; Gemma's post-norms, embedding
scale, GeGLU, attention scale, per-layer sliding windows and RoPE bases, the global
layers' linear RoPE factor), read by the
same forward pass
(`engine/model/families.py` decides the options and refuses what is not implemented).

Even the `succ` bigram test model is a Llama here: zero layers, an identity embedding and a
shifted LM head (see `tests/models.py`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from engine.tokenizer.base import Tokenizer


@dataclass(frozen=True, kw_only=True)
class Llama3RopeScaling:
    """Llama 3's RoPE frequency scaling (HF `rope_type: "llama3"`), see engine/model/rope.py."""
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


@dataclass(frozen=True, kw_only=True)
class FamilyOptions:
    """What one model family changes in the shared decoder (the defaults are plain Llama)."""
    family: str = "llama"
    qkv_bias: bool = False          # Qwen2: q/k/v projections add a bias (o_proj has none)
    qk_norm: bool = False           # Qwen3: RMSNorm over each q and k head [hd] before RoPE
    rope_scaling: Llama3RopeScaling | None = None
    # A GGUF's `rope_freqs` tensor: pair i's frequency is divided by divisor i. [hd/2]
    rope_freq_divisors: tuple[float, ...] | None = None
    # Gemma 3: norms after attention and after the MLP too (post_attention/post_ffw norms)
    post_norms: bool = False
    embed_scale: float | None = None        # input embeddings are multiplied by this (sqrt(d))
    mlp_activation: str = "silu"            # the gate's activation: "silu" or "gelu_tanh"
    attn_scale: float | None = None         # scores scale (None: head_dim**-0.5)
    # Sliding-window layers (Gemma 3): layer i attends keys j with i - window < j <= i
    # (positions) when sliding_layers[i]; those layers use RoPE base local_rope_theta.
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] = ()
    local_rope_theta: float | None = None
    # Gemma 3 4B+ (HF rope_type "linear" on full-attention layers): the global layers'
    # RoPE frequencies are divided by this (positions / factor); sliding layers keep theirs.
    global_rope_linear_factor: float | None = None

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer `layer` in tokens (None: it sees every earlier key)."""
        if self.sliding_window is None or layer >= len(self.sliding_layers):
            return None
        return self.sliding_window if self.sliding_layers[layer] else None


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
    options: FamilyOptions = FamilyOptions()

    @property
    def q_size(self) -> int:        # columns of Q in the fused QKV matrix
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:       # columns of K (and of V) in the fused QKV matrix
        return self.num_kv_heads * self.head_dim

    @property
    def attn_scale(self) -> float:  # what q.k is multiplied by before the softmax
        scale = self.options.attn_scale
        return self.head_dim ** -0.5 if scale is None else scale

    def layer_rope_theta(self, layer: int) -> float:
        """RoPE base of layer `layer`: sliding layers may use their own (Gemma 3: 10,000)."""
        local = self.options.local_rope_theta
        if local is not None and self.options.layer_window(layer) is not None:
            return local
        return self.rope_theta


@dataclass(frozen=True, kw_only=True)
class LayerWeights:
    """One transformer block, float32, input-major (`x @ W`)."""
    attn_norm: np.ndarray           # [d]
    wqkv: np.ndarray                # [d, H*hd + 2*KV*hd]   columns: q | k | v (rotate-half rows)
    wo: np.ndarray                  # [H*hd, d]
    mlp_norm: np.ndarray            # [d]
    w_gate_up: np.ndarray           # [d, 2*ff]             columns: gate | up
    w_down: np.ndarray              # [ff, d]
    bqkv: np.ndarray | None = None  # [H*hd + 2*KV*hd]  q | k | v biases (options.qkv_bias)
    q_norm: np.ndarray | None = None  # [hd]            per-head q RMSNorm (options.qk_norm)
    k_norm: np.ndarray | None = None  # [hd]            per-head k RMSNorm (options.qk_norm)
    post_attn_norm: np.ndarray | None = None  # [d]     on attention's output (options.post_norms)
    post_mlp_norm: np.ndarray | None = None   # [d]     on the MLP's output (options.post_norms)


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
    `chat_template` is the model's Jinja source as found beside the weights (None: it shipped
    none). The engine never parses it: templates are text, the server's business (it parses
    the source once at start-up, see template/template.py). The maths over `config` and
    `weights` is `engine/model/llama.py` (`llama.forward(model.config, model.weights, ids)`).
    """
    name: str
    config: ModelConfig
    weights: LlamaWeights
    tokenizer: Tokenizer
    chat_template: str | None = None    # the model's own template source (None: none shipped)
    source_path: str = ""               # the .gguf file or model folder it came from
    extra: dict = field(default_factory=dict)
