"""A quality item: one prompt, its references, how it is scored, and what it is grouped by."""

from __future__ import annotations

from dataclasses import dataclass, field

SCORERS = ("exact", "contains", "regex", "numeric", "choice", "number", "word")


@dataclass(frozen=True, slots=True)
class QualityItem:
    """One quality prompt, sent identically (greedy, fixed seed) to every arm."""

    id: str  # stable within its suite ("niah-8k-d50-s3", or the user's id / "line 12")
    suite: str  # "niah", "keys", "exact", or a user suite's name
    cluster: str  # items sharing a context share a cluster (resampled together)
    scorer: str  # one of SCORERS
    references: tuple[str, ...]  # any one matching is right
    prompt: str | None = None
    messages: tuple[dict, ...] | None = None  # chat messages; used instead of ``prompt``
    bucket: str = "all"  # length bucket of the paired statistics ("4k", "16k", "short"…)
    context_tokens: int | None = None  # the prompt's intended length, when known
    tolerance: float = 0.0  # numeric scorer: |x − ref| ≤ tolerance
    max_tokens: int | None = None  # overrides the run's cap
    echoes: tuple[str, ...] = ()  # number scorer: the question's own numbers, passed over
    distractors: tuple[str, ...] = ()  # number scorer: other values in the context, never right
    stop: tuple[str, ...] = ()  # stop sequences when sent as a completion (not chat)
    api: str | None = None  # "chat" | "completions": how it is sent (None: the arm's api)
    timeout_s: float | None = None  # longest silence while it is answered (None: the arm's)
    tags: tuple[str, ...] = field(default_factory=tuple)

    def detail_doc(self) -> dict:
        """What the quality table's ``detail`` JSON keeps about the item (with the output)."""
        return (
            {
                "id": self.id,
                "suite": self.suite,
                "cluster": self.cluster,
                "bucket": self.bucket,
                "scorer": self.scorer,
                "references": list(self.references),
                "context_tokens": self.context_tokens,
            }
            | ({"echoes": list(self.echoes)} if self.echoes else {})
            | ({"distractors": list(self.distractors)} if self.distractors else {})
            | ({"api": self.api} if self.api else {})
        )
