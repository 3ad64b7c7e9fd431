"""engine: token ids in, token ids out. Model files, tokenizers, the numpy Llama and the
paged, continuously batching engine. Knows nothing about HTTP.

    model = engine.load_model("artifacts/models/smol-135m")   # GGUF or HF directory
    logits = model.forward(model.tokenizer.encode("Hello"))   # [n, vocab] float32
"""
from engine.loader import load_model

__all__ = ["load_model"]
