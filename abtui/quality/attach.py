"""The quality lines a verdict's pairs carry beside their gates: each arm's stored perplexity,
the logprob-agreement sentence and the flat-PPL warning (:func:`attach`)."""

from __future__ import annotations

from abtui.quality.gates import flat_ppl_warning
from abtui.quality.logprobs import logprob_line
from abtui.quality.ppl import Perplexity


def attach(verdict, meta: dict) -> None:
    """Add the stored perplexities (``meta.quality_ppl``) and the flat-PPL warning to every pair
    that has a quality section."""
    ppl = {n: Perplexity.from_dict(m) for n, m in (meta.get("quality_ppl") or {}).items()}
    raw = meta.get("quality_logprobs")
    for pair in verdict.pairs + verdict.ladder:
        q = pair.quality
        if q is None:
            continue
        pair.quality = q.with_notes(
            logprob_line(pair.baseline, pair.candidate, raw),
            {n: ppl[n] for n in (pair.baseline, pair.candidate) if n in ppl},
            flat_ppl_warning(ppl, pair.baseline, pair.candidate, q),
        )
