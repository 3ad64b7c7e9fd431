"""The served model's chat format: parsed once at server start-up from the loader's source text.

The engine hands the template over as text (`Model.chat_template`); `server.text.served.ServedModel`
parses it, so a broken template stops start-up naming the model file and the template's
line, and the plain default stands in when the model ships none (or an empty one).
"""
from __future__ import annotations

import shutil

import pytest

from engine.api import ModelFormatError, load_model
from server.text.messages import Message
from server.text.served import ServedModel

MAX_LEN = 2048


@pytest.fixture
def tiny_copy(tiny_llama_dir, tmp_path):
    return shutil.copytree(tiny_llama_dir, tmp_path / "copy")


def served(directory) -> ServedModel:
    return ServedModel(load_model(directory), "tiny", MAX_LEN)


def test_template_is_parsed_at_load_and_defaults_when_absent(tiny_copy):
    assert load_model(tiny_copy).chat_template is None
    assert served(tiny_copy).render((Message("user", "Hi"),)) == "<|user|>\nHi\n<|assistant|>\n"
    (tiny_copy / "chat_template.jinja").write_text("{{ messages[0]['content'] | upper }}")
    assert served(tiny_copy).render((Message("user", "hi"),)) == "HI"


def test_empty_template_file_means_the_plain_default(tiny_copy):
    (tiny_copy / "chat_template.jinja").write_text("  \n")
    prompt = served(tiny_copy).render((Message("user", "Hi"),))
    assert prompt == "<|user|>\nHi\n<|assistant|>\n"


def test_broken_template_fails_at_load_naming_the_file(tiny_copy):
    (tiny_copy / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}")
    model = load_model(tiny_copy)               # the engine never parses templates
    with pytest.raises(ModelFormatError, match=r"copy: chat template does not parse.*'for'.*line 1"):
        ServedModel(model, "tiny", MAX_LEN)


def test_the_real_chat_prompt_ends_with_the_generation_prompt(real_model):
    """The chat route renders with the default: the model's turn is opened for it."""
    served_real = ServedModel(real_model, "smol-135m", MAX_LEN)
    messages = (Message("system", "S"), Message("user", "Hi"))
    prompt = served_real.render(messages)
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    closed = served_real.render(messages, add_generation_prompt=False)
    assert closed.endswith("<|im_start|>user\nHi<|im_end|>\n")
    opener = served_real.encode("<|im_start|>assistant\n")
    assert served_real.encode(prompt)[-len(opener):] == opener
