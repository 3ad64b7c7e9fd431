"""engine: token ids in, token ids out. Knows nothing about HTTP, text templates or SSE.

Find a part by its folder:

    engine/api.py      the public surface the server uses (load_model, Engine, the values)
    engine/types.py    the values that cross threads: requests, outputs, config, stats
    engine/errors.py   the engine's exceptions (file problems, refused requests)
    engine/memory.py   glibc malloc tuning; engine/blas_env.py: OpenBLAS's thread spin
    engine/formats/    bytes on disk -> float32 tensors (GGUF, safetensors, quantisations)
    engine/model/      hyper-parameters and weights, the numpy decoder, the loader
    engine/tokenizer/  byte tokenizer, byte-level BPE, SentencePiece-style BPE, WordPiece
    engine/encoder/    sentence-embedding encoders (BERT as sentence-transformers runs it)
    engine/kv/         the paged KV cache: pools, decode mirror, block tables, radix tree
    engine/core/       sequences, scheduler, batched runner, sampler, speculation, Engine
    engine/grammar/    constrained decoding: JSON Schema / regex -> automaton, token masks

This file imports nothing, so `import engine.types` stays light.
"""
