"""Checks of the spec's workload and arrival fields (called by :func:`abtui.spec.validate`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

from abtui.errors import SpecError


def check_workload(spec, source: str) -> None:
    from abtui.workload.synthetic import parse_length_dist

    w, ld = spec.workload, spec.load
    if w.file is not None and not Path(w.file).is_file():
        raise SpecError(
            f"{source}: workload.file {w.file!r} does not exist",
            "write one with `abtui workload import`",
        )
    for key in ("input_dist", "output_dist"):
        if getattr(w, key) is not None:
            parse_length_dist(getattr(w, key), f"{source}: workload.{key}")
    if (w.prefix_groups > 0) != (w.prefix_tokens > 0):
        raise SpecError(
            f"{source}: shared prefixes need both workload.prefix_groups and prefix_tokens",
            "e.g. --prefix-groups 8 --prefix-tokens 256",
        )
    if w.task is not None:
        from abtui.workload.tasks import TASKS

        if w.task not in TASKS:
            raise SpecError(
                f"{source}: workload.task must be one of {', '.join(TASKS)}, got {w.task!r}"
            )
        if w.file is not None or w.prefix_groups:
            raise SpecError(
                f"{source}: workload.task makes its own prompts: it takes no "
                "workload.file or shared prefixes"
            )
    _check_conversations(spec, source)
    _check_images(spec, source)
    _check_load_shape(spec, source)
    from_file = w.file is not None or w.conversations is not None
    if from_file and ld.rate is None and ld.concurrency is None:
        ld.arrival = "replay"  # a file and no load given: its own timestamps
    if ld.arrival == "replay":
        if not from_file:
            raise SpecError(
                f"{source}: load.arrival = 'replay' replays a workload file's timestamps",
                "give --workload FILE",
            )
        if ld.rate is not None:
            raise SpecError(
                f"{source}: load.rate and arrival = 'replay' exclude each other",
                "replay follows the file's timestamps; --speedup scales them",
            )


# an HTTP header name (RFC 9110 token): nothing that could end the header or start another
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _check_conversations(spec, source: str) -> None:
    """``workload.conversations``, ``workload.history`` and ``request.session_header``."""
    from abtui.workload.conversations import HISTORIES

    w = spec.workload
    if w.history not in HISTORIES:
        raise SpecError(
            f"{source}: workload.history must be one of {', '.join(HISTORIES)}, got {w.history!r}"
        )
    header = spec.request.session_header
    if header and not _HEADER_NAME.fullmatch(header):
        raise SpecError(
            f"{source}: request.session_header {header!r} is not an HTTP header name",
            'e.g. "X-Session-ID"; "" sends none',
        )
    if w.conversations is None:
        if w.history != "recorded":
            raise SpecError(
                f"{source}: workload.history applies to a conversation file",
                "give --conversations FILE",
            )
        return
    if not Path(w.conversations).is_file():
        raise SpecError(
            f"{source}: workload.conversations {w.conversations!r} does not exist",
            "write one with `abtui workload conversations`",
        )
    if w.file is not None or w.task is not None or w.prefix_groups:
        raise SpecError(
            f"{source}: workload.conversations is the whole workload: it takes no "
            "workload.file, task or shared prefixes"
        )
    not_chat = [a.name for a in spec.arms if (a.api or spec.request.api) != "chat"]
    if not_chat:
        raise SpecError(
            f"{source}: a conversation is sent as chat messages; arm(s) "
            f"{', '.join(not_chat)} use the completions API",
            'set request.api = "chat" (--api chat)',
        )


def _check_images(spec, source: str) -> None:
    """Made images: a synthetic workload's, in chat messages, of sizes that parse."""
    from abtui.client.images import parse_sizes

    w = spec.workload
    try:
        parse_sizes(w.image_size)
    except ValueError as e:
        raise SpecError(
            f"{source}: workload.image_size: {e}", "e.g. 512x512 or 256x256,1024x768"
        ) from None
    if not w.images_per_request:
        return
    if w.file is not None or w.conversations is not None:
        raise SpecError(
            f"{source}: workload.images_per_request makes images for synthetic prompts",
            "a workload file carries its images in its messages (image_url content parts)",
        )
    from abtui.workload.build import check_chat_images

    check_chat_images(spec, source)


def _check_load_shape(spec, source: str) -> None:
    """Sweep, runs and arm scheduling."""
    from abtui.workload.segments import SCHEDULES

    ld = spec.load
    if ld.sweep_rate and ld.sweep_concurrency:
        raise SpecError(f"{source}: sweep either rates or concurrencies, not both")
    if ld.sweep_rate:
        if not all(r > 0 and math.isfinite(r) for r in ld.sweep_rate):
            raise SpecError(
                f"{source}: load.sweep_rate must be positive rates, got {ld.sweep_rate}"
            )
        ld.rate = ld.rate or ld.sweep_rate[0]  # open loop
    if ld.sweep_concurrency:
        if not all(c >= 1 for c in ld.sweep_concurrency):
            raise SpecError(
                f"{source}: load.sweep_concurrency must be ≥ 1, got {ld.sweep_concurrency}"
            )
        if ld.rate is not None:
            raise SpecError(f"{source}: a concurrency sweep is closed loop: drop load.rate")
        ld.concurrency = ld.sweep_concurrency[0]
    closed = ld.rate is None and not ld.sweep_rate and ld.arrival != "replay"
    if ld.duration_s is not None:
        if not ld.duration_s > 0:
            raise SpecError(f"{source}: load.duration must be > 0")
        w = spec.workload
        if closed and w.requests is None and w.file is None and w.conversations is None:
            raise SpecError(
                f"{source}: a closed-loop run with a duration needs a request count",
                "give --requests N as well (the most it may send)",
            )
    if ld.runs < 1 or ld.blocks < 1 or ld.generators < 1:
        raise SpecError(f"{source}: load.runs, load.blocks and load.generators must be ≥ 1")
    concs = [c for c in [ld.concurrency, *(ld.sweep_concurrency or [])] if c]
    if concs and ld.generators > min(concs):
        raise SpecError(
            f"{source}: {ld.generators} generator processes per arm cannot share a concurrency "
            f"of {min(concs)}",
            "use at most as many generators as requests in flight",
        )
    if ld.schedule not in SCHEDULES:
        raise SpecError(
            f"{source}: load.schedule must be one of {', '.join(SCHEDULES)}, got {ld.schedule!r}"
        )
