"""engine: token ids in, token ids out. Knows nothing about HTTP, text templates or SSE.

Find a part by its folder:

    engine/api.py      the public surface the server uses (load_model, Engine, the values)
    engine/types.py    the values that cross threads: requests, outputs, config, stats
    engine/errors.py   the engine's exceptions (file problems, refused requests)
    engine/formats/    bytes on disk -> float32 tensors (GGUF, safetensors, quantisations)
    engine/model/      hyper-parameters and weights, the numpy Llama, the loader
    engine/tokenizer/  byte tokenizer and byte-level BPE
    engine/kv/         the paged KV cache: pools, decode mirror, block tables, radix tree
    engine/core/       sequences, scheduler, batched runner, sampler, speculation, Engine

This file imports nothing, so `import engine.types` stays light.
"""
