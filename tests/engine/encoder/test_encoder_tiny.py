"""The Encoder on a tiny random BERT: batching and padding change nothing, pooling and
normalisation as the modules say, the length limit and truncation, token-id inputs.

(Exactness against Hugging Face is test_encoder_oracle.py, on the real weights.)
"""
from __future__ import annotations

import numpy as np
import pytest

from engine.encoder import encoder as encoder_module
from engine.encoder.bert import encode_batch
from engine.encoder.encoder import load_encoder, plan_batches
from engine.errors import InputTooLong, InvalidRequest
from tests.engine.encoder.tiny_bert import MODULES, write_tiny_bert

TEXTS = ["the cat sat", "a cat", "the cat sat on the mat .", "playing cats", "", "mat, mat"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_encoder(write_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert"))


def test_the_folder_reads_as_a_sentence_encoder(tiny):
    assert (tiny.name, tiny.hidden_size, tiny.max_seq_length) == ("tiny-bert", 8, 12)
    assert tiny.token_ids(["Playing cats."])[0] == [2, 10, 11, 6, 12, 13, 3]


def test_a_vector_does_not_depend_on_its_batch_or_its_padding(tiny, monkeypatch):
    together = tiny.embed(TEXTS)
    alone = np.stack([tiny.embed([t])[0] for t in TEXTS])
    monkeypatch.setattr(encoder_module, "MAX_BATCH_TOKENS", 9)    # many small batches
    small_batches = tiny.embed(TEXTS)
    assert together.shape == (len(TEXTS), 8) and together.dtype == np.float32
    assert np.abs(together - alone).max() < 1e-6
    assert np.abs(small_batches - alone).max() < 1e-6
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-6)


def test_mean_pooling_without_normalize_is_the_mean_of_the_real_positions(tmp_path):
    enc = load_encoder(write_tiny_bert(tmp_path / "m", modules=MODULES[:2]))
    rows = enc.token_ids(["the cat sat", "a"])
    ids = np.zeros((2, 5), np.int64)
    for b, row in enumerate(rows):
        ids[b, :len(row)] = row
    hidden = encode_batch(enc.weights, enc.config, ids, np.array([5, 3]))
    vectors = enc.embed(["the cat sat", "a"])
    assert np.allclose(vectors[0], hidden[0].mean(axis=0), atol=1e-6)
    assert np.allclose(vectors[1], hidden[1, :3].mean(axis=0), atol=1e-6)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0)


def test_cls_pooling_takes_the_first_position(tmp_path):
    enc = load_encoder(write_tiny_bert(tmp_path / "c", pooling={
        "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    row = enc.token_ids(["the cat sat"])[0]
    hidden = encode_batch(enc.weights, enc.config, np.array([row]), np.array([len(row)]))
    first = hidden[0, 0] / np.linalg.norm(hidden[0, 0])
    assert np.allclose(enc.embed(["the cat sat"])[0], first, atol=1e-6)


def test_an_over_long_input_is_refused_with_its_index_and_count(tiny):
    long_text = " ".join(["cat"] * 11)                      # 13 tokens with [CLS]/[SEP]
    with pytest.raises(InputTooLong) as refused:
        tiny.embed(["a", long_text])
    assert (refused.value.input_index, refused.value.prompt_tokens,
            refused.value.max_model_len) == (1, 13, 12)
    assert "input 1 has 13 tokens" in str(refused.value)


def test_truncation_keeps_cls_the_first_pieces_and_sep(tiny):
    words = "the cat sat on the mat a cat sat on the mat"
    ids = tiny.token_ids([words], truncate=True)[0]
    full = tiny.token_ids(["x"])[0][:1] + tiny.tokenizer.encode(words)
    assert ids == full[:11] + [tiny.tokenizer.sep_token_id] and len(ids) == 12
    assert np.allclose(tiny.embed([words], truncate=True), tiny.embed_ids([ids]))


def test_token_id_inputs_are_used_verbatim_and_checked(tiny):
    ids = tiny.token_ids(["the cat sat"])[0]
    assert np.allclose(tiny.embed([ids]), tiny.embed(["the cat sat"]), atol=1e-7)
    with pytest.raises(InvalidRequest, match="input 1: token id 99"):
        tiny.embed([ids, [2, 99, 3]])
    with pytest.raises(InvalidRequest, match="input 0: an empty list"):
        tiny.embed([[]])
    assert len(tiny.token_ids([list(range(5)) * 4], truncate=True)[0]) == 12
    with pytest.raises(InputTooLong):
        tiny.embed([list(range(5)) * 4])


def test_no_inputs_give_an_empty_matrix(tiny):
    assert tiny.embed([]).shape == (0, 8)


def test_batches_group_similar_lengths_within_the_token_budget():
    lengths = [5, 30, 6, 7, 29, 100, 4]
    batches = plan_batches(lengths, max_batch_tokens=60)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        padded = len(batch) * max(lengths[i] for i in batch)
        assert padded <= 60 or len(batch) == 1
    assert [sorted(lengths[i] for i in b) for b in batches] == [[4, 5, 6, 7], [29, 30], [100]]


def test_iter_batches_covers_every_row_once_within_the_budget(tiny):
    rows = tiny.token_ids(TEXTS)
    seen, batches = [], 0
    for indices, vectors in tiny.iter_batches(rows, max_batch_tokens=10):
        batches += 1
        assert len(indices) * max(len(rows[i]) for i in indices) <= 10 or len(indices) == 1
        assert np.allclose(vectors, tiny.embed_ids([rows[i] for i in indices]), atol=1e-6)
        seen.extend(indices.tolist())
    assert sorted(seen) == list(range(len(rows))) and batches > 2
