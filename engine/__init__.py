"""engine: token ids in, token ids out. Model files, tokenizers, the numpy Llama and the
paged, continuously batching engine. Knows nothing about HTTP."""
