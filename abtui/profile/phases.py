"""Which phase a step is, from the trace's annotations, and which step an activity is in.

vLLM's workers (v1, checked on vLLM 0.32's ``Worker.annotate_profile``) wrap every engine step
while profiling in a user annotation that counts the step's context (prefill) and generation
(decode) requests and tokens::

    execute_context_2(4096)_generation_30(30)
    execute_4126_context_2(sq4096sk4096sqsq…sqsk…)_generation_30(sq30sk…)   # detailed form

A step with context requests only is **prefill**, with generation requests only **decode**,
with both **mixed** (chunked prefill riding along with decode). A trace without those names
falls back on any annotation that says ``prefill``/``extend`` or ``decode`` as a word (SGLang's
forward modes, a user's own ``record_function``/NVTX ranges); a trace with neither has no
steps and one phase, ``all``.
"""

from __future__ import annotations

import bisect
import re

from abtui.profile.model import Step, StepCounts

PHASES = ("prefill", "decode", "mixed", "all", "unmarked")

_VLLM = re.compile(
    r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)"
)
_SIDE = r"\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
_DETAILED = re.compile(rf"execute_\d+_context_\d+{_SIDE}_generation_\d+{_SIDE}")


def vllm_counts(label: str) -> StepCounts | None:
    """The requests and tokens a vLLM step annotation counts (``None``: not one)."""
    m = _VLLM.match(label)
    if not m:
        return None
    basic = [int(g) for g in m.groups()]
    d = _DETAILED.match(label)
    if not d:
        return StepCounts(*basic)
    sq, sk, sqsq, sqsk = (int(g) for g in d.groups()[:4])
    gq, gk, gqq, gqk = (int(g) for g in d.groups()[4:])
    # causal pairs: Σ q·(k − q) + q(q + 1)/2 = sqsk − (sqsq − sq)/2
    return StepCounts(*basic, sk, sqsk - (sqsq - sq) / 2, gk, gqk - (gqq - gq) / 2)


_PREFILL = re.compile(r"(?<![a-z])(?:prefill|extend)(?![a-z])", re.IGNORECASE)
_DECODE = re.compile(r"(?<![a-z])decode(?![a-z])", re.IGNORECASE)


def vllm_phase(label: str) -> str | None:
    """The phase of a vLLM step annotation; ``None`` for another name or an empty step."""
    m = _VLLM.match(label)
    if not m:
        return None
    context, generation = int(m.group(1)), int(m.group(3))
    if context and generation:
        return "mixed"
    if context:
        return "prefill"
    return "decode" if generation else None


def generic_phase(label: str) -> str | None:
    """The phase a free-form annotation names (both words: mixed), or ``None``."""
    prefill, decode = bool(_PREFILL.search(label)), bool(_DECODE.search(label))
    if prefill and decode:
        return "mixed"
    return "prefill" if prefill else "decode" if decode else None


def find_steps(ranges: list[tuple[str, float, float]]) -> list[Step]:
    """Steps from ``(name, start, end)`` annotation ranges: vLLM's step names when the trace
    has any, else the generic words; sorted by start."""
    steps = [Step(s, e, p, n, vllm_counts(n)) for n, s, e in ranges if (p := vllm_phase(n))]
    if not steps and not any(_VLLM.match(n) for n, _, _ in ranges):
        steps = [Step(s, e, p, n) for n, s, e in ranges if (p := generic_phase(n))]
    return sorted(steps, key=lambda st: (st.start, st.end))


class StepIndex:
    """Finds the step whose window ``[start, end)`` holds a time (the latest-starting one)."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self._starts = [s.start for s in steps]

    def find(self, t: float) -> int | None:
        i = bisect.bisect_right(self._starts, t) - 1
        # steps do not overlap in a real trace; look back a little in case a few do
        for j in range(i, max(-1, i - 4), -1):
            if self.steps[j].start <= t < self.steps[j].end:
                return j
        return None
