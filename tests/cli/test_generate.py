"""The offline generator (cli/generate.py) on the text layer and the paged engine: the chat
template and the context rule of `ServedModel`, stop strings of `GenerationText`, seeds."""
from __future__ import annotations

import io

import pytest

from cli.generate import main, render_prompt, served_model
from engine.api import load_model


def run(model_dir, *args) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--model-dir", str(model_dir), *args], out=out)
    return code, out.getvalue()


def greedy(model_dir, prompt: str, *extra: str) -> str:
    code, text = run(model_dir, "--prompt", prompt, "--raw", "--temperature", "0",
                     "--max-tokens", "24", *extra)
    assert code == 0
    return text


def test_the_chat_template_renders_the_prompt_and_raw_keeps_it(tiny_llama_dir):
    served = served_model(load_model(tiny_llama_dir))     # the plain default template
    assert render_prompt(served, "Hi", raw=False) == "<|user|>\nHi\n<|assistant|>\n"
    assert render_prompt(served, "Hi", raw=True) == "Hi"


def test_a_stop_string_ends_the_answer_before_it(tiny_llama_dir):
    whole = greedy(tiny_llama_dir, "hello there").rstrip("\n")
    stop = whole[len(whole) // 2:len(whole) // 2 + 2]     # text from the answer's middle
    assert len(whole) >= 6 and stop.strip()
    cut = greedy(tiny_llama_dir, "hello there", "--stop", stop)
    assert cut == whole[:whole.index(stop)] + "\n"


def test_a_prompt_past_the_context_is_a_clean_error(tiny_llama_dir, capsys):
    code, text = run(tiny_llama_dir, "--prompt", "hello " * 600, "--raw", "--max-tokens", "4")
    assert (code, text) == (2, "")
    assert "maximum context length is 512 tokens" in capsys.readouterr().err


def test_the_command_is_reproducible_by_seed(tiny_llama_dir):
    def once(seed: int) -> str:
        code, text = run(tiny_llama_dir, "--prompt", "hello there", "--raw", "--max-tokens",
                         "12", "--temperature", "1.0", "--seed", str(seed))
        assert code == 0
        return text

    first = once(1)
    assert first == once(1) and first.endswith("\n")
    assert len({once(s) for s in range(2, 6)} | {first}) > 1      # seeds matter


def test_the_command_rejects_bad_arguments(tiny_llama_dir, capsys):
    with pytest.raises(SystemExit):
        main(["--model-dir", str(tiny_llama_dir), "--prompt", "x", "--max-tokens", "0"])
    assert "--max-tokens" in capsys.readouterr().err
