"""The engine's values: what goes in (`GenRequest`), what comes out (`TokenOut`), how it is
tuned (`EngineConfig`) and what it reports (`EngineStats`).

These are plain frozen dataclasses so the server thread and the engine thread can pass
them across a queue without sharing mutable state. This module imports nothing of the
engine at run time (the grammar type only for annotations): reading it costs nothing. The server reaches these through `engine/api.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:                   # for the annotations only: the grammar's and adapter's modules
    from engine.grammar.automaton import Grammar
    from engine.model.lora import LoraAdapter

RequestId = int



class Finish(StrEnum):
    """Why the engine ended a request (`TokenOut.finish`), as the OpenAI API spells the
    first two; a str, so it compares and serialises as its value."""
    STOP = "stop"           # EOS / a stop id / (server side) a stop string
    LENGTH = "length"       # max_tokens or the model's context limit
    DEADLINE = "deadline"   # waited in the queue past its deadline (server: 503 no_capacity)


FINISH_STOP, FINISH_LENGTH, FINISH_DEADLINE = Finish.STOP, Finish.LENGTH, Finish.DEADLINE

MAX_TOP_LOGPROBS = 20

# The allowed values of two settings, the one source for the engine's checks and the server's.
PREFIX_CACHE_MODES = ("radix", "none")        # EngineConfig.prefix_cache
# SpeculativeConfig.method: "auto" = every draft source; else that one source alone
SPECULATIVE_METHODS = ("auto", "prompt_lookup", "suffix", "prediction", "grammar")


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    temperature: float = 1.0       # 0 = greedy
    top_p: float = 1.0             # (0, 1]
    top_k: int = 0                 # 0 = off
    min_p: float = 0.0             # 0 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0  # vLLM / HF style multiplicative penalty, 1 = off
    logit_bias: tuple[tuple[int, float], ...] = ()
    logprobs: bool = False         # report the sampled token's logprob
    top_logprobs: int = 0          # 0..MAX_TOP_LOGPROBS alternatives per token
    ignore_eos: bool = False
    min_tokens: int = 0            # EOS / stop ids are masked until this many tokens exist


@dataclass(frozen=True, kw_only=True)
class CacheScope:
    """Which requests may share what the engine keeps between them: prefix-cache blocks and
    the suffix store's drafted continuations. Only requests with EQUAL scopes share.

    The adapter changes the K/V (its q/k/v products), so two adapters never share a block;
    the salt is a tenant's secret (a cached prefix or a drafted answer is a timing side
    channel), so two salts never share, and a salted request never shares with an unsalted
    one. The adapter compares by identity (`LoraAdapter` is one object per load): an adapter
    unloaded and loaded again under its name shares nothing with its earlier self. The
    adapter also rides here for the forward (`Chunk.adapter`): one value, two uses."""
    adapter: LoraAdapter | None = None     # None: the base model alone
    salt: str | None = None                # None: unsalted (the server refuses an empty salt)


BASE_SCOPE = CacheScope()


@dataclass(frozen=True, kw_only=True)
class GenRequest:
    prompt: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None        # None: the engine draws one
    max_tokens: int = 16
    stop_ids: tuple[int, ...] = ()  # extra stop token ids (the model's EOS ids always stop unless ignore_eos)
    priority: int = 0              # higher runs first; FCFS within a priority
    deadline_s: float | None = None  # engine-clock time by which it must be scheduled, else FINISH_DEADLINE
    grammar: Grammar | None = None  # compiled, immutable (engine/grammar/): constrained decoding
    # Score the prompt: None = off; k = each prompt token's logprob plus the top-k
    # (0..MAX_TOP_LOGPROBS) at every position, as `PromptLogprobs` events. Such a request
    # takes no cached prefix blocks (every position must be computed). With max_tokens 0 it
    # ends after its prompt (TokenOut(token=None, finish="length")), sampling nothing.
    prompt_logprobs: int | None = None
    # A fork (the 2nd..n-th choice of one prompt): while a running sequence is still
    # computing the whole KV blocks this prompt shares with it, wait, then take them from
    # the prefix cache (shared, not copied; the partial tail block is recomputed).
    wait_for_prefix: bool = False
    # Predicted output (OpenAI's `prediction`): token ids the answer is expected to repeat
    # (the file being edited). Only a source of speculative drafts: outputs never change.
    prediction: tuple[int, ...] = ()
    # The LoRA adapter the request runs on and the tenant's salt: what it may share (above).
    scope: CacheScope = BASE_SCOPE


@dataclass(frozen=True, kw_only=True)
class TokenOut:
    id: RequestId
    token: int | None              # None only for a failure without a token (deadline)
    logprob: float = 0.0
    top_logprobs: tuple[tuple[int, float], ...] = ()
    finish: Finish | None = None   # None while the request goes on
    # A request with a `prediction`: its drafted prediction tokens the model accepted /
    # rejected SO FAR (OpenAI's usage.completion_tokens_details), on each step's last TokenOut
    # of it and on its finishing one; running totals, never decreasing (else 0).
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class PromptLogprobs:
    """Scores of prompt tokens start .. start+len-1 (start >= 1: token 0 has no context),
    from the log-softmax of the raw logits at the position before each token. One event
    per prefill chunk; `complete` on the one that reaches the end of the prompt."""
    id: RequestId
    start: int
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]     # best first, per token
    complete: bool = False


@dataclass(frozen=True, kw_only=True)
class SpeculativeConfig:
    method: str = "auto"           # one of SPECULATIVE_METHODS (engine/core/drafts/policy.py)
    # Prompt lookup's drafts, at most (every source: up to SPEC_MAX_DRAFT_TOKENS = 32). The
    # draft-length rule picks each draft's length by the lookup's streak of accepted tokens,
    # so this only bounds it, as for the other sources (on an edit's answer copying its
    # file the lookup is right ~98% of the time: a cap of 4 wasted that).
    num_speculative_tokens: int = 32
    prompt_lookup_min: int = 2     # n-gram sizes tried, longest first
    prompt_lookup_max: int = 4


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    block_size: int = 16                    # tokens per KV block
    kv_cache_mib: int = 1536                # memory budget for the K/V pools (smol-135m: 2184 blocks, 35k tokens)
    num_kv_blocks: int | None = None        # overrides kv_cache_mib when set (tests use tiny pools)
    max_num_seqs: int = 128                 # sequences in one step
    max_loras: int = 4                      # distinct LoRA adapters in one step (the base not counted)
    lora_merge: bool = True                 # a step on one adapter alone runs on its merged weights
    max_batched_tokens: int = 2048          # tokens in one step (decode rows + prefill chunks)
    prefill_chunk: int = 512                # longest prefill piece of one sequence per step
    tokens_beside_decode: int = 128         # the latency policy: prefill + embedding rows in a step
                                            # that also decodes, at least (engine/core/scheduler.py)
    itl_target_ms: int = 400                # ... and more while the learned step time stays within
                                            # this (0: the fixed allowance only); planned at 0.4 s,
                                            # a step's p99 lands near 0.5 s: the stated ITL target
    prefix_cache: str = "radix"             # one of PREFIX_CACHE_MODES: "radix" | "none"
    max_model_len: int | None = None        # None: the model's max_position_embeddings
    speculative: SpeculativeConfig | None = None


@dataclass(frozen=True, kw_only=True)
class EngineStats:
    kv_blocks_used: int = 0
    kv_blocks_cached: int = 0               # unreferenced but kept for prefix reuse
    kv_blocks_free: int = 0
    queue_depth: int = 0                    # waiting requests
    active_sequences: int = 0               # running (scheduled at least once, not finished)
    batch_tokens: int = 0                   # tokens in the last step
    prefix_hit_ratio: float = 0.0           # tokens reused / prompt tokens, since start
    prefix_hit_tokens: int = 0
    prompt_tokens: int = 0
    preemptions_total: int = 0
    prefix_waits_total: int = 0             # requests that waited for a shared prefix in flight
    evictions_total: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    # Per draft source, since start: (source name, drafted tokens, accepted tokens).
    spec_by_source: tuple[tuple[str, int, int], ...] = ()
    steps_total: int = 0
    # LoRA adapters (by name, sorted) of the running and of the waiting sequences, and the
    # most one step holds (EngineConfig.max_loras): the gateway's lora_requests_info.
    running_adapters: tuple[str, ...] = ()
    waiting_adapters: tuple[str, ...] = ()
    max_loras: int = 0
    # Steps on one adapter alone run on a merged copy of its weights (engine/model/lora_merge.py):
    # the adapter held ("": none) and its copied bytes; steps by path, merges built, since start.
    lora_merged_adapter: str = ""
    lora_merged_bytes: int = 0
    lora_merged_steps_total: int = 0
    lora_grouped_steps_total: int = 0
    lora_merges_built_total: int = 0


@dataclass(frozen=True, kw_only=True)
class KvSize:
    """The KV cache's fixed size, chosen at start-up (`Engine.kv_size()`)."""
    num_blocks: int
    block_size_tokens: int
    nbytes: int                             # the pools' bytes (K and V, every layer)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size_tokens
