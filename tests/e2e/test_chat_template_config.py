"""`[engine].chat_template` / `--chat-template FILE` at start-up, on the tiny Llama (which ships
no chat template of its own).

Given a file, chats render with it (seen through /v1/tokenize's ids); a file that cannot be
read or does not parse stops the start-up with one line naming it; with no template anywhere
the start-up warns once that the plain default is used and how to give one. A model's own
template that does not parse is a one-line start-up error too, pointing at the override.
"""
from __future__ import annotations

import json
import logging
import shutil

import pytest

from server.serve import StartupError, main
from tests.e2e.helpers import post, running_server

MARKED_TEMPLATE = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}<go>"
WARNING_WORDS = ("no chat template", "plain default", 'chat_template = "path"', "--chat-template FILE")


def _tokens(handle, body: dict) -> list[int]:
    response = post(handle, "/v1/tokenize", body)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def _template_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "chat template" in r.getMessage()]


def test_a_model_without_a_template_warns_once_how_to_give_one(tiny_llama_dir, caplog):
    caplog.set_level(logging.INFO, logger="tlserve")
    with running_server(tiny_llama_dir):
        pass
    warnings = _template_warnings(caplog)
    assert len(warnings) == 1
    assert all(words in warnings[0] for words in WARNING_WORDS), warnings[0]


def test_a_given_template_replaces_the_default_and_silences_the_warning(tiny_llama_dir, tmp_path, caplog):
    path = tmp_path / "marked.jinja"
    path.write_text(MARKED_TEMPLATE, encoding="utf-8")
    caplog.set_level(logging.INFO, logger="tlserve")
    with running_server(tiny_llama_dir, chat_template=str(path)) as handle:
        model = tiny_llama_dir.name
        chat = _tokens(handle, {"model": model, "messages": [{"role": "user", "content": "hi"}]})
        expected = _tokens(handle, {"model": model, "prompt": "[user]hi<go>", "add_special_tokens": False})
    assert chat == expected
    assert _template_warnings(caplog) == []


@pytest.mark.parametrize("text, words", [(None, "cannot read the chat template"),
                                         ("{% for m in messages %}", "does not parse"),
                                         ("  \n", "is empty")])
def test_a_bad_template_file_stops_the_start_up_naming_it(tiny_llama_dir, tmp_path, text, words):
    path = tmp_path / "chat.jinja"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    with pytest.raises(StartupError) as info:
        with running_server(tiny_llama_dir, chat_template=str(path)):
            pass
    assert words in str(info.value) and str(path) in str(info.value)
    assert "[engine].chat_template" in str(info.value)


def test_a_model_template_that_does_not_parse_stops_the_start_up_in_one_line(tiny_llama_dir, tmp_path):
    broken = shutil.copytree(tiny_llama_dir, tmp_path / "broken")
    config_path = broken / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_path.write_text(json.dumps({**config, "chat_template": "{% if x %}"}), encoding="utf-8")
    with pytest.raises(StartupError) as info:            # not the loader's ModelFormatError
        with running_server(broken):
            pass
    assert str(broken) in str(info.value) and "chat template does not parse" in str(info.value)
    assert "--chat-template FILE" in str(info.value)


def test_the_command_line_prints_one_line_for_a_bad_template(tiny_llama_dir, tmp_path, capsys):
    missing = tmp_path / "missing.jinja"
    code = main(["--model-dir", str(tiny_llama_dir), "--chat-template", str(missing),
                 "--port", "0", "--health-port", "0", "--log-level", "ERROR"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines == [f"tlserve: cannot read the chat template {missing} ([engine].chat_template): "
                     "No such file or directory"]
