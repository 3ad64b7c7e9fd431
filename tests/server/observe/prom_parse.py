"""Reading a /metrics page as a scraper does, asserting the text format on the way (the
metrics tests share it): one HELP and TYPE per family before its samples, every sample of a
declared family, well-formed names and labels."""
from __future__ import annotations

import re

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (\S+)$')


def parse(text: str) -> tuple[dict[str, str], dict[str, float]]:
    """(family -> type, sample -> value); asserts the format rules on the way."""
    types, samples, helped = {}, {}, set()
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert name in helped and name not in types
            assert kind in ("counter", "gauge", "histogram")
            types[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, line
            name = match.group(1)
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in types or family in types, name
            samples[name + (match.group(2) or "")] = float(match.group(4))
    return types, samples
