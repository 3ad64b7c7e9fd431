"""instructor (PyPI `instructor`, in its own venv `.venv-instructor`: it pins an older openai
client than the suite's) against a tl-serve, as its users call it: JSON mode, a pydantic
model, no retries. Run by tests/e2e/test_structured_clients.py and bench/client_lengths.py.

    .venv-instructor/bin/python tests/e2e/instructor_client.py BASE_URL MODEL PROMPTS_FILE MAX_TOKENS

PROMPTS_FILE holds a JSON list of user messages; one JSON line is printed per prompt:
{"finish": <finish_reason or null>, "object": <the validated object or null>, "error": <the
exception's class or null>}.
"""
from __future__ import annotations

import json
import sys

import instructor
import openai
import pydantic
from instructor.core.exceptions import IncompleteOutputException


class Person(pydantic.BaseModel):
    name: str
    age: int
    job: str


def main(base_url: str, model: str, prompts_path: str, max_tokens: str) -> None:
    client = instructor.from_openai(openai.OpenAI(base_url=base_url, api_key="unused"),
                                    mode=instructor.Mode.JSON)
    for prompt in json.loads(open(prompts_path, encoding="utf-8").read()):
        finish, obj, error = None, None, None
        try:
            person, completion = client.chat.completions.create_with_completion(
                model=model, response_model=Person, max_retries=0, temperature=0,
                max_tokens=int(max_tokens), messages=[{"role": "user", "content": prompt}])
            finish, obj = completion.choices[0].finish_reason, person.model_dump()
        except IncompleteOutputException:
            finish, error = "length", "IncompleteOutputException"
        except Exception as exc:                                  # noqa: BLE001 (counted)
            error = type(exc).__name__
        print(json.dumps({"finish": finish, "object": obj, "error": error}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
