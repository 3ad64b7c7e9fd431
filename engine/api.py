"""The engine's public surface: everything the server (and the CLI) may use, and nothing else.

    model = load_model("artifacts/models/smol-135m")     # a .gguf file or a model folder
    engine = Engine(model, EngineConfig(max_num_seqs=64))
    request_id = engine.add_request(GenRequest(prompt=(1, 2, 3), max_tokens=16))
    outs = engine.step()                                 # list[TokenOut]

    encoder = load_encoder("artifacts/models/all-minilm-l6-v2")   # a sentence-embedding model
    vectors = encoder.embed(["some text"], truncate=False)      # float32 [1, 384]

The rooms behind it (`formats/`, `model/`, `tokenizer/`, `kv/`, `core/`) are the engine's
own business: the server imports this module only, so the engine can be rearranged
without touching the server. An import checker in the tests keeps that true.
"""
from __future__ import annotations

from engine.core.engine import Engine, check_context
from engine.core.sampler import sample
from engine.core.snapshot import (BLOCK_CACHED, BLOCK_FREE, BLOCK_SHARED, BLOCK_USED,
                                  EngineSnapshot, StepRecord, StepRow)
from engine.core.speculative import SPECULATIVE_RULES
from engine.core.speculative import check_config as check_speculative_config
from engine.encoder.encoder import Encoder, load_encoder
from engine.errors import (InputTooLong, InvalidConfig, InvalidRequest, ModelFormatError,
                           PromptTooLong, RequestRefused, UnsupportedModel)
from engine.grammar.automaton import Grammar
from engine.grammar.budget import MAX_COMPILE_WORK
from engine.grammar.compile import CallSyntax, GrammarCache, GrammarSpec, schema_spec, tool_calls_spec
from engine.grammar.errors import GrammarError, GrammarInvalid, GrammarUnsupported
from engine.grammar.json_schema import MAX_SCHEMA_DEPTH
from engine.grammar.thinking import ThinkPrefix
from engine.kv.blocks import PREFIX_CACHE_RULE, check_prefix_cache
from engine.memory import tune_malloc
from engine.model.lora import LoraAdapter, load_adapter
from engine.model.loader import KIND_CHAT, KIND_EMBEDDING, load_model, model_kind, model_name
from engine.model.places import DEFAULT_MODEL_DIR, user_model_dir
from engine.model.spec import Model, ModelConfig
from engine.tokenizer.base import Tokenizer
from engine.types import (BASE_SCOPE, FINISH_DEADLINE, FINISH_LENGTH, FINISH_STOP, Finish, MAX_TOP_LOGPROBS,
                          PREFIX_CACHE_MODES, SPECULATIVE_METHODS, CacheScope, EngineConfig, EngineStats,
                          GenRequest, KvSize, PromptLogprobs, RequestId, SamplingParams,
                          SpeculativeConfig, TokenOut)

__all__ = [
    "BASE_SCOPE", "CacheScope", "load_adapter", "LoraAdapter",
    "BLOCK_CACHED", "BLOCK_FREE", "BLOCK_SHARED", "BLOCK_USED", "CallSyntax", "check_context",
    "check_prefix_cache", "check_speculative_config", "DEFAULT_MODEL_DIR", "Encoder", "Engine",
    "EngineConfig", "EngineSnapshot", "EngineStats", "FINISH_DEADLINE", "FINISH_LENGTH",
    "FINISH_STOP", "Finish", "GenRequest", "Grammar", "GrammarCache", "GrammarError",
    "GrammarInvalid", "GrammarSpec", "GrammarUnsupported", "InputTooLong", "InvalidConfig",
    "InvalidRequest", "KIND_CHAT", "KIND_EMBEDDING", "KvSize", "load_encoder", "load_model",
    "model_kind",
    "MAX_COMPILE_WORK", "MAX_SCHEMA_DEPTH", "MAX_TOP_LOGPROBS", "Model", "model_name",
    "ModelConfig", "ModelFormatError", "UnsupportedModel",
    "PREFIX_CACHE_MODES", "PREFIX_CACHE_RULE", "PromptLogprobs", "PromptTooLong", "RequestId",
    "RequestRefused", "sample", "SamplingParams", "schema_spec", "SPECULATIVE_METHODS",
    "SPECULATIVE_RULES", "SpeculativeConfig", "StepRecord", "StepRow", "ThinkPrefix", "Tokenizer", "TokenOut",
    "tool_calls_spec",
    "tune_malloc", "user_model_dir",
]
