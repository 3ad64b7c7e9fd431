"""server/text/reasoning.py: the streamed split equals the whole split at every cut, and the
whole split follows the rule Qwen3's template uses to read a past answer."""
from __future__ import annotations

import pytest

from server.text.reasoning import ANSWER, REASONING, ReasoningSplitter, Split, Thinking


def template_rule(text: str, starts_inside: bool) -> Split:
    """The reference, written from Qwen3's chat template (how it reads an assistant turn):
    reasoning = between the tags, newlines trimmed; content = after `</think>`, leading
    newlines dropped. No opening tag (and not opened by the prompt): all of it is content."""
    if not starts_inside:
        stripped = text.lstrip()
        if not stripped.startswith("<think>"):
            return Split(content=text)
        text = stripped[len("<think>"):]
    if "</think>" not in text:
        return Split(reasoning=text.strip("\n"))
    reasoning, content = text.split("</think>", 1)
    return Split(reasoning=reasoning.strip("\n"), content=content.lstrip("\n"))


CASES = [
    ("<think>\nI should greet.\n</think>\n\nHello!", False),
    ("<think>\n\n</think>\n\nHello!", False),
    ("  <think>a < b </thin k></think>x</think>y", False),
    ("<think>\nstill thinking when max_tokens hit\n\n", False),
    ("Plain answer, no thinking.\n", False),
    ("\nAn answer that starts with a newline", False),
    ("<thinking is not the tag", False),
    ("<th", False),
    ("reasoning opened by the prompt\n</think>\n\nanswer", True),
    ("", False),
    ("", True),
    ("<think>one</think>\n\n<think>two</think>", False),
]


@pytest.mark.parametrize("text,starts_inside", CASES)
def test_the_whole_split_follows_the_template_rule(text, starts_inside):
    """The whole text in one piece, through the splitter a request's `Thinking` makes (as a
    non-streamed answer whose tokens came in one poll)."""
    splitter = Thinking(starts_inside=starts_inside).splitter()
    assert splitter.push(text) + splitter.finish() == template_rule(text, starts_inside)


@pytest.mark.parametrize("text,starts_inside", CASES)
def test_streamed_pieces_join_to_the_whole_split_at_every_cut(text, starts_inside):
    whole = template_rule(text, starts_inside)
    for cut in range(len(text) + 1):
        for second_cut in range(cut, len(text) + 1):
            splitter = ReasoningSplitter(starts_inside=starts_inside)
            joined = Split()
            for piece in (text[:cut], text[cut:second_cut], text[second_cut:]):
                joined = joined + splitter.push(piece)
            assert joined + splitter.finish() == whole, (cut, second_cut)


def test_one_character_at_a_time_sends_reasoning_before_the_tag_closes():
    splitter = ReasoningSplitter()
    sent = [splitter.push(ch) for ch in "<think>\nabc\n</think>\n\nok"]
    assert splitter.phase == ANSWER
    # the reasoning's characters go out as they come, not all at the closing tag
    assert [s.reasoning for s in sent if s.reasoning] == ["a", "b", "c"]
    assert "".join(s.content for s in sent) + splitter.finish().content == "ok"


def test_a_partial_closing_tag_is_held_back_until_it_cannot_be_one():
    splitter = ReasoningSplitter()
    assert splitter.push("<think>x</th") == Split(reasoning="x")
    assert splitter.phase == REASONING
    assert splitter.push("e") == Split(reasoning="</the")
