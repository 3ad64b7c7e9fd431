"""all-MiniLM-L6-v2 (the real weights) against sentence-transformers' embeddings.

Oracle: ../shared/oracle/families/minilm-l6/embeddings.jsonl (see its README): 20 texts
encoded as one padded batch by transformers in float32, mean pooling over the attention
mask, L2 normalisation; the last text has 422 tokens and was truncated to 256
([CLS] + 254 pieces + [SEP]). The folder comes from `fetch-model all-minilm-l6-v2` (the
`minilm_dir` fixture fetches it once).
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.api import InputTooLong, KIND_EMBEDDING, load_encoder, model_kind
from tests.oracle import read_jsonl

pytestmark = pytest.mark.real_model

ROWS = read_jsonl("families/minilm-l6/embeddings.jsonl")
MIN_COSINE = 0.99999               # README's suggested tolerance
MAX_ABS_DIFF = 1e-5


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    return load_encoder(minilm_dir)


def _assert_close(vectors: np.ndarray, rows: list[dict]) -> None:
    expected = np.array([r["embedding"] for r in rows])
    cosine = (vectors * expected).sum(1) / (np.linalg.norm(vectors, axis=1)
                                            * np.linalg.norm(expected, axis=1))
    assert cosine.min() >= MIN_COSINE, dict(zip([r["index"] for r in rows], cosine))
    assert np.abs(vectors - expected).max() <= MAX_ABS_DIFF


def test_the_folder_is_an_embedding_model_of_the_stated_shape(minilm, minilm_dir):
    assert model_kind(minilm_dir) == KIND_EMBEDDING
    assert (minilm.hidden_size, minilm.max_seq_length, minilm.config.num_layers,
            minilm.config.vocab_size) == (384, 256, 6, 30522)
    assert minilm.pipeline.pooling == "mean" and minilm.pipeline.normalize


def test_token_ids_after_truncation_are_the_oracle_s(minilm):
    ids = minilm.token_ids([r["text"] for r in ROWS], truncate=True)
    assert ids == [r["ids"] for r in ROWS]
    assert ids[-1][-3:] == [1997, 9798, 102] and len(ids[-1]) == 256


def test_the_padded_batch_with_the_over_long_input_matches(minilm):
    _assert_close(minilm.embed([r["text"] for r in ROWS], truncate=True), ROWS)


def test_each_input_alone_matches_too(minilm):
    vectors = np.stack([minilm.embed([r["text"]], truncate=True)[0] for r in ROWS[::3]])
    _assert_close(vectors, ROWS[::3])


def test_token_id_inputs_give_the_same_vectors(minilm):
    _assert_close(minilm.embed([r["ids"] for r in ROWS[:5]]), ROWS[:5])


def test_without_truncation_the_long_input_is_refused_by_index_and_count(minilm):
    long_row = ROWS[-1]
    assert long_row["n_tokens_untruncated"] == 422
    with pytest.raises(InputTooLong) as refused:
        minilm.embed([r["text"] for r in ROWS])
    assert (refused.value.input_index, refused.value.prompt_tokens) == (long_row["index"], 422)
