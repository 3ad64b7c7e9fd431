"""A folder asking for maths the encoder does not implement is refused, naming file and key;
and the chat loader sends a BERT folder to load_encoder."""
from __future__ import annotations

import pytest

from engine.api import (KIND_CHAT, KIND_EMBEDDING, ModelFormatError, UnsupportedModel,
                        load_encoder, load_model, model_kind)
from tests.engine.encoder.tiny_bert import MODULES, write_tiny_bert

DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.mark.parametrize("overrides, file, words", [
    ({"config": {"position_embedding_type": "relative_key"}}, "config.json",
     "position_embedding_type 'relative_key'"),
    ({"config": {"hidden_act": "gelu_new"}}, "config.json", "hidden_act 'gelu_new'"),
    ({"config": {"is_decoder": True}}, "config.json", "is_decoder True"),
    ({"config": {"model_type": "roberta"}}, "config.json", "model_type 'roberta'"),
    ({"pooling": {"pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}},
     "1_Pooling/config.json", "pooling_mode_max_tokens"),
    ({"pooling": {"pooling_mode_cls_token": True}}, "1_Pooling/config.json",
     "pooling_mode_cls_token"),
    ({"modules": MODULES[:2] + [DENSE]}, "modules.json", "Dense"),
], ids=["relative-positions", "tanh-gelu", "decoder", "roberta", "max-pooling",
        "two-poolings", "dense-module"])
def test_unimplemented_maths_is_refused_naming_file_and_key(tmp_path, overrides, file, words):
    folder = write_tiny_bert(tmp_path / "m", **overrides)
    with pytest.raises(UnsupportedModel) as refused:
        load_encoder(folder)
    assert refused.value.path == str(folder / file)
    assert words in refused.value.problem


def test_a_folder_without_modules_json_is_refused(tmp_path):
    folder = write_tiny_bert(tmp_path / "m")
    (folder / "modules.json").unlink()
    with pytest.raises(UnsupportedModel, match="modules.json: missing"):
        load_encoder(folder)


def test_a_max_seq_length_beyond_the_positions_is_refused(tmp_path):
    folder = write_tiny_bert(tmp_path / "m", sentence={"max_seq_length": 17})
    with pytest.raises(ModelFormatError, match="sentence_bert_config.json: max_seq_length 17"):
        load_encoder(folder)


def test_a_weight_of_the_wrong_shape_is_named(tmp_path):
    folder = write_tiny_bert(tmp_path / "m", config={"intermediate_size": 32})
    with pytest.raises(ModelFormatError, match="encoder.layer.0.intermediate.dense.weight: "
                                               "shape \\[16, 8\\]"):
        load_encoder(folder)


def test_load_model_points_a_bert_folder_at_load_encoder(tmp_path, tiny_llama_dir):
    folder = write_tiny_bert(tmp_path / "m")
    with pytest.raises(UnsupportedModel, match="load it with load_encoder"):
        load_model(folder)
    assert model_kind(folder) == KIND_EMBEDDING
    assert model_kind(tiny_llama_dir) == KIND_CHAT
