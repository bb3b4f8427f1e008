"""The quality lines a verdict's pairs carry beside their gates: each arm's stored perplexity,
the logprob-agreement sentence and the flat-PPL warning (:func:`attach`)."""

from __future__ import annotations

from abtui.quality.logprobs import logprob_line
from abtui.quality.ppl import flat_ppl_warning


def attach(verdict, meta: dict) -> None:
    """Add the stored perplexities (``meta.quality_ppl``) and the flat-PPL warning to every pair
    that has a quality section."""
    ppl = meta.get("quality_ppl") or {}
    raw = meta.get("quality_logprobs")
    for pair in verdict.pairs + verdict.ladder:
        if pair.quality is None:
            continue
        pair.quality["logprob_line"] = logprob_line(pair.baseline, pair.candidate, raw)
        pair.quality["ppl"] = {n: ppl[n] for n in (pair.baseline, pair.candidate) if n in ppl}
        warn = flat_ppl_warning(ppl, pair.baseline, pair.candidate, pair.quality)
        if warn:
            pair.quality["warnings"].append(warn)
