"""Sentence-embedding encoders: BERT (all-MiniLM-L6-v2) as sentence-transformers runs it.

`spec.py` reads what the folder says (BERT's config, the modules, pooling, max length) and
refuses what is not implemented; `bert.py` holds the weights and the encoder's maths;
`erf.py` the exact GELU; `encoder.py` the `Encoder` (tokenize, batch, pool) and
`load_encoder`. An encoder is its own room, not one more family in model/: it has no KV
cache, no sampling and no decoding loop, and it returns vectors, not tokens.
"""
