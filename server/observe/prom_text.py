"""The Prometheus text format 0.0.4, the part every /metrics family is written with.

Format (prometheus.io/docs/instrumenting/exposition_formats): per metric family a
`# HELP name text` line, a `# TYPE name counter|gauge|histogram` line, then samples
`name{label="value",...} number`. A histogram is cumulative `name_bucket{...,le="..."}`
lines ending in `le="+Inf"`, then `name_sum` and `name_count`, once per label set.
A family appears once on a page (Prometheus refuses a second HELP/TYPE of one name), so
every writer here takes all the samples of a family at once.
"""
from __future__ import annotations

import bisect
import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[tuple[str, str], ...]        # (("model_name", "smol"), ("le", "0.1"))
Sample = tuple[Labels, float]


def number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def labels_text(pairs: Labels) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def family(name: str, kind: str, help_text: str, samples: list[Sample]) -> str:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels_text(labels)} {number(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"


class Histogram:
    """Cumulative-bucket histogram (observations in seconds) of one label set."""

    __slots__ = ("name", "help_text", "bounds", "counts", "total", "count")

    def __init__(self, name: str, help_text: str, bounds: tuple[float, ...]):
        self.name, self.help_text, self.bounds = name, help_text, bounds
        self.counts = [0] * (len(bounds) + 1)     # last slot: above every bound
        self.total = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1   # le is inclusive
        self.total += value
        self.count += 1

    def sample_lines(self, labels: Labels = ()) -> list[str]:
        """The bucket, sum and count lines of this histogram under `labels` (`le` last)."""
        lines, running = [], 0
        for bound, n in zip(self.bounds + (math.inf,), self.counts):
            running += n
            lines.append(f"{self.name}_bucket{labels_text(labels + (('le', number(bound)),))} "
                         f"{running}")
        lines.append(f"{self.name}_sum{labels_text(labels)} {number(self.total)}")
        lines.append(f"{self.name}_count{labels_text(labels)} {self.count}")
        return lines

    def render(self) -> str:
        return histogram_family([((), self)])


def histogram_family(histograms: list[tuple[Labels, Histogram]]) -> str:
    """One histogram family: the HELP/TYPE of the first, then every label set's lines (all
    of one name and bounds: the same measurement of several models)."""
    first = histograms[0][1]
    lines = [f"# HELP {first.name} {first.help_text}", f"# TYPE {first.name} histogram"]
    for labels, histogram in histograms:
        lines += histogram.sample_lines(labels)
    return "\n".join(lines) + "\n"
