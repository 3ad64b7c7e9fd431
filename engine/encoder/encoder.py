"""`load_encoder(folder) -> Encoder`: a sentence-transformers BERT, texts in, vectors out.

    encoder = load_encoder("artifacts/models/all-minilm-l6-v2")
    vectors = encoder.embed(["a sentence", "another"])        # float32 [2, 384], unit length

`embed` takes texts (tokenized with [CLS] ... [SEP]) or token-id lists (used verbatim: the
caller's ids are the model's input). An input longer than `max_seq_length` raises
`InputTooLong` naming its index and token count, unless `truncate=True`: then a text is cut
as sentence-transformers cuts it, [CLS] + its first max-2 word pieces + [SEP], and an id
list keeps its first `max_seq_length` ids.

Batching: the inputs are sorted by length and cut into padded batches of at most
`MAX_BATCH_TOKENS` padded tokens, one forward each (similar lengths share a batch, so
little padding is computed); the vectors come back in the caller's order. Pooling follows
the folder's modules (mean over the real tokens, or [CLS]), then L2 normalisation when the
Normalize module is listed.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.encoder.bert import BertWeights, encode_batch, load_bert_weights
from engine.encoder.spec import (POOLING_CLS, BertConfig, SentencePipeline, bert_config_from,
                                 pipeline_from)
from engine.errors import InputTooLong, InvalidRequest, ModelFormatError
from engine.model.loader import model_name
from engine.tokenizer.base import TokenizerError
from engine.tokenizer.wordpiece import WordPieceTokenizer, wordpiece_from_folder

MAX_BATCH_TOKENS = 2048        # padded tokens per forward: bounds the [B, T, 4H] temporaries
                               # and one forward's time (~0.3-1 s on 2 busy cores)
MIN_NORM = 1e-12               # torch.nn.functional.normalize's eps: a zero vector stays zero

EncoderInput = str | Sequence[int]


@dataclass(frozen=True)
class Encoder:
    """A loaded sentence-embedding model (see the module docstring)."""
    name: str
    config: BertConfig
    pipeline: SentencePipeline
    weights: BertWeights
    tokenizer: WordPieceTokenizer
    source_path: str

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    @property
    def max_seq_length(self) -> int:
        return self.pipeline.max_seq_length

    def token_ids(self, inputs: Sequence[EncoderInput], truncate: bool = False
                  ) -> list[list[int]]:
        """Each input as the model will see it (checked, truncated when asked)."""
        return [self._one_input(i, item, truncate) for i, item in enumerate(inputs)]

    def embed(self, inputs: Sequence[EncoderInput], truncate: bool = False) -> np.ndarray:
        """float32 [len(inputs), hidden_size]: one pooled (normalised) vector per input."""
        return self.embed_ids(self.token_ids(inputs, truncate))

    def embed_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """Vectors of inputs already passed through `token_ids` (no checks again)."""
        out = np.zeros((len(rows), self.hidden_size), dtype=np.float32)
        for batch, vectors in self.iter_batches(rows):
            out[batch] = vectors
        return out

    def iter_batches(self, rows: Sequence[Sequence[int]],
                     max_batch_tokens: int | None = None
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(indices into rows, their vectors [len(indices), H]) one forward at a time, so a
        caller sharing the CPU can run other work between batches; a smaller
        max_batch_tokens (default MAX_BATCH_TOKENS) makes each forward shorter."""
        budget = MAX_BATCH_TOKENS if max_batch_tokens is None else max_batch_tokens
        for batch in plan_batches([len(r) for r in rows], budget):
            yield batch, self._embed_batch([rows[i] for i in batch])

    def _one_input(self, index: int, item: EncoderInput, truncate: bool) -> list[int]:
        limit = self.max_seq_length
        if isinstance(item, str):
            text = item.lower() if self.pipeline.lowercase_text else item
            ids = self.tokenizer.encode(text, add_special_tokens=True)
            if len(ids) > limit and truncate:      # [CLS] + first limit-2 pieces + [SEP]
                ids = ids[:limit - 1] + [self.tokenizer.sep_token_id]
        else:
            ids = [int(token_id) for token_id in item]
            bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
            if bad:
                raise InvalidRequest(f"input {index}: token id {bad[0]} is outside the "
                                     f"vocabulary (0..{self.config.vocab_size - 1})")
            if not ids:
                raise InvalidRequest(f"input {index}: an empty list of token ids")
            if truncate:
                ids = ids[:limit]
        if len(ids) > limit:
            raise InputTooLong(index, len(ids), limit)
        return ids

    def _embed_batch(self, rows: list[Sequence[int]]) -> np.ndarray:
        """One padded forward over rows of ids -> pooled vectors [len(rows), H]."""
        lengths = np.array([len(r) for r in rows])
        ids = np.full((len(rows), int(lengths.max())), self.tokenizer.pad_token_id, np.int64)
        for b, row in enumerate(rows):
            ids[b, :len(row)] = row
        hidden = encode_batch(self.weights, self.config, ids, lengths)     # [B, T, H]
        if self.pipeline.pooling == POOLING_CLS:
            pooled = hidden[:, 0, :]
        else:                                     # mean over each row's real tokens
            real = (np.arange(ids.shape[1])[None, :] < lengths[:, None]).astype(np.float32)
            pooled = np.einsum("bt,bth->bh", real, hidden) / lengths[:, None].astype(np.float32)
        if self.pipeline.normalize:
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            pooled = pooled / np.maximum(norms, np.float32(MIN_NORM))
        return pooled.astype(np.float32, copy=False)


def plan_batches(lengths: Sequence[int], max_batch_tokens: int) -> list[np.ndarray]:
    """Input indices grouped by similar length, each group's padded size (rows x longest)
    at most max_batch_tokens (a single longer input gets a batch of its own)."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    batches: list[np.ndarray] = []
    start = 0
    for end in range(1, len(order) + 1):
        longest = lengths[order[end - 1]]
        if end - start > 1 and (end - start) * longest > max_batch_tokens:
            batches.append(order[start:end - 1])
            start = end - 1
    if start < len(order):
        batches.append(order[start:])
    return batches


def load_encoder(path: str | os.PathLike) -> Encoder:
    """A sentence-transformers BERT folder (config.json, model.safetensors, tokenizer.json
    or vocab.txt, modules.json, 1_Pooling/, sentence_bert_config.json) -> Encoder."""
    directory = Path(path)
    if not directory.is_dir():
        raise ModelFormatError(directory, "not a model folder")
    config = bert_config_from(directory)
    pipeline = pipeline_from(directory, config)
    try:
        tokenizer = wordpiece_from_folder(directory)
    except (TokenizerError, KeyError, ValueError, TypeError) as error:
        raise ModelFormatError(directory, f"bad tokenizer: {error}") from None
    if tokenizer.vocab_size > config.vocab_size:
        raise ModelFormatError(directory, f"the tokenizer has {tokenizer.vocab_size} tokens, "
                                          f"the model {config.vocab_size}")
    weights = load_bert_weights(directory, config)
    return Encoder(name=model_name(directory), config=config, pipeline=pipeline,
                   weights=weights, tokenizer=tokenizer, source_path=str(directory))
