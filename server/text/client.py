"""The API's one way to a chat model's engine: `EngineClient`, one per served chat model.

    client.generate(requests, rules, ...) -> Generation     chat, completions, Responses
    client.embed(inputs, encoding_format, ...) -> EmbedTicket   embeddings of a chat model
    client.served                                            the model as text (template,
                                                             tokenizer, length rules)

`generate` admits every choice's engine request or none of them (a 429 on a later choice
aborts the earlier ones) and gives each ticket its `ChoiceOutput`, so the engine thread
turns the request's tokens into text pieces right after each step
(server/text/generation.py). The API never touches a ticket, the bridge or an event: it
renders the `Generation`'s pieces and cancels it when its client leaves.
"""
from __future__ import annotations

from typing import Sequence

from engine.api import GenRequest
from server.errors import ApiError
from server.text.gentext import Echo
from server.text.generation import Generation, TextRules, choice_outputs
from server.text.served import ServedModel
from server.worker.bridge import EngineBridge
from server.worker.embedding_jobs import EmbedTicket


class EngineClient:
    """One chat model: its text layer and its engine thread, behind two calls."""

    def __init__(self, served: ServedModel, bridge: EngineBridge):
        self.served = served
        self._bridge = bridge

    @property
    def model_id(self) -> str:
        return self.served.id

    def generate(self, requests: Sequence[GenRequest], rules: TextRules, *,
                 request_id: str = "", echoes: Sequence[Echo | None] | None = None) -> Generation:
        """One engine request per choice, admitted together (loop thread): the whole
        answer or none of it. Raises the refusal (429, 500 engine down) unchanged."""
        choices = choice_outputs(self.served.tokenizer, rules, len(requests), echoes)
        generation = Generation(choices, self._bridge)
        admitted = []
        try:
            for request, choice in zip(requests, choices):
                choice.ticket = self._bridge.submit(request, request_id=request_id,
                                                    output=choice)
                admitted.append(choice.ticket)
        except ApiError:
            for ticket in admitted:
                self._bridge.abort(ticket)
            raise
        return generation

    def embed(self, inputs: list[list[int]], encoding_format: str, *,
              request_id: str = "") -> EmbedTicket:
        """An embeddings call on this model's engine (admitted like a generation)."""
        return self._bridge.embed(inputs, encoding_format, request_id=request_id)
