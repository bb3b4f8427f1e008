"""A profiling window during a session (``abtui run --profile``, the spec's ``[profile]``).

Once the measured phase has run ``after_s`` (warm-up done), every arm's server is asked to
profile — ``POST /start_profile`` at the server's root (the arm's URL without ``/v1``), as
vLLM (started with ``--profiler-config``), SGLang and ``abtui sim serve`` serve it — and
``duration_s`` later (or when the load ends first) ``POST /stop_profile``. The calls run in a
thread of their own, every arm at once, so the session's message loop never waits on a
server writing its trace (vLLM's stop takes seconds).

The window, per arm from just before its start call to just after its stop call returned, is
stored as the ``profile_window`` meta key as soon as it closes (:mod:`abtui.store.profiled`
leaves the items that ran in it out of the latency figures). After the load the traces are
picked up — the path ``/stop_profile`` answered (the simulator's), ``--profile-trace
ARM=PATH``, or the files new in ``[profile] dir`` — analysed (:mod:`abtui.profile.stored`) and
stored as the ``profile`` meta key, so the reports need the traces no more.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from abtui.client.target import Target
from abtui.spec import Spec

if TYPE_CHECKING:  # the analysis is imported when a window closes: most runs never profile
    from abtui.profile.stored import ArmTraces

_now = time.perf_counter_ns
CALL_TIMEOUT_S = 120.0  # a stop call: the server writes its trace before it answers
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".csv")


@dataclass
class _Arm:
    arm: int
    name: str
    root: str  # the server's root URL (no /v1)
    target: Target
    start_ns: int | None = None
    end_ns: int | None = None
    started_wall: float = 0.0  # time.time() at the start call: traces newer than this
    error: str | None = None
    answered: list[str] = field(default_factory=list)  # paths /stop_profile named


def _root(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


def _said(r: httpx.Response) -> str:
    text = r.text.strip().replace("\n", " ")
    return f"HTTP {r.status_code}" + (f": {text[:200]}" if text else "")


class ProfileWindow:
    """The window of one session (see the module docstring). ``tick`` from the message loop,
    ``finish`` after the load, ``close`` whatever happened."""

    def __init__(self, spec: Spec, targets: list[Target], say) -> None:
        self.pr = spec.profile
        self.say = say
        self.arms = [
            _Arm(i, a.name, _root(a.url), t)
            for i, (a, t) in enumerate(zip(spec.arms, targets, strict=True))
        ]
        self.hardware = [
            {
                "gpu": a.gpu,
                "model_preset": a.model_preset,
                "model_config": a.model_config,
                "dtype": a.dtype,
                "kv_dtype": a.kv_dtype,
                "tp": a.gpus or 1,
            }
            for a in spec.arms
        ]
        self.state = "waiting"  # → starting → open → stopping → closed
        self.opened_ns: int | None = None
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, spec: Spec, targets: list[Target], say) -> ProfileWindow | None:
        return cls(spec, targets, say) if spec.profile.enabled else None

    # -- the calls ------------------------------------------------------------------------
    def _call(self, a: _Arm, what: str, body: dict | None) -> httpx.Response | None:
        t = a.target
        try:
            with httpx.Client(
                trust_env=False,
                verify=t.tls,
                headers=t.headers,
                timeout=httpx.Timeout(CALL_TIMEOUT_S, connect=t.connect_timeout_s),
            ) as c:
                return c.post(f"{a.root}/{what}", json=body)
        except httpx.HTTPError as e:
            a.error = f"POST {a.root}/{what} failed: {type(e).__name__}: {e}"
        return None

    def _start_one(self, a: _Arm) -> None:
        # vLLM 0.32 takes overrides (profile_prefix names its trace files, so that servers
        # sharing a folder are told apart; max_iterations), SGLang num_steps; each ignores
        # the others' keys
        body: dict = {"profile_prefix": prefix_of(a.name)}
        if self.pr.steps:
            body |= {"num_steps": self.pr.steps, "max_iterations": self.pr.steps}
        a.started_wall = time.time()
        a.start_ns = _now()
        r = self._call(a, "start_profile", body)
        if r is not None and r.status_code >= 300:
            a.error = f"POST /start_profile: {_said(r)}"
            if r.status_code == 404:
                a.error += (
                    " (a vLLM server profiles only when started with --profiler-config; "
                    "SGLang and abtui sim serve: docs/profile.md)"
                )
        if a.error:
            a.start_ns = None

    def _stop_one(self, a: _Arm) -> None:
        if a.start_ns is None:
            return
        r = self._call(a, "stop_profile", None)
        a.end_ns = _now()
        if r is None:
            return
        if r.status_code >= 300:
            a.error = f"POST /stop_profile: {_said(r)}"
            return
        try:
            doc = r.json()
        except ValueError:
            doc = None
        path = doc.get("trace") if isinstance(doc, dict) else None
        if isinstance(path, str):
            a.answered.append(path)

    def _all(self, fn, then: str) -> None:
        threads = [threading.Thread(target=fn, args=(a,), daemon=True) for a in self.arms]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.state = then

    def _in_background(self, fn, then: str) -> None:
        self._thread = threading.Thread(target=self._all, args=(fn, then), daemon=True)
        self._thread.start()

    # -- driven by the session -----------------------------------------------------------
    def tick(self, conductor, now_ns: int, stopping: bool) -> None:
        """Open the window ``after_s`` into the measured phase (the ``conductor``'s first
        segment's ``t0``), close it ``duration_s`` after it opened; nothing new once a stop
        was asked (``stopping``)."""
        pr = self.pr
        log = conductor.log if conductor is not None else []
        t0_ns = log[0].get("t0_ns") if log else None
        if self.state == "waiting" and t0_ns is not None and not stopping:
            if now_ns >= t0_ns + pr.after_s * 1e9:
                self.state = "starting"
                self.opened_ns = now_ns
                self._in_background(self._start_one, "open")
        elif self.state == "open" and (
            stopping or now_ns >= (self.opened_ns or now_ns) + pr.duration_s * 1e9
        ):
            self.state = "stopping"
            self._in_background(self._stop_one, "closed")

    def _close_now(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self.state == "open":
            self.state = "stopping"
            self._all(self._stop_one, "closed")

    def windows(self) -> list[tuple[int, int, int]]:
        """``(arm, start_ns, end_ns)`` of each window opened so far; one still open ends at
        the largest time (every request so far may have run in it)."""
        return [
            (a.arm, a.start_ns, a.end_ns if a.end_ns is not None else (1 << 63) - 1)
            for a in self.arms
            if a.start_ns is not None
        ]

    def window_doc(self) -> dict:
        return {
            "after_s": self.pr.after_s,
            "duration_s": self.pr.duration_s,
            "steps": self.pr.steps,
            "arms": [
                {
                    "arm": a.arm,
                    "name": a.name,
                    "start_ns": a.start_ns,
                    "end_ns": a.end_ns if a.start_ns is not None else None,
                    "error": a.error,
                }
                for a in self.arms
            ],
        }

    def finish(self, writer) -> None:
        """After the load: the window closed (if still open) and stored, the traces picked up,
        analysed and stored."""
        if self.state == "waiting":
            self.say(
                "profile: the load ended before the window opened "
                f"({self.pr.after_s:g} s into the measured phase)"
            )
            writer.event("profile", "the load ended before the profiling window opened")
            writer.write_meta(profile_window=self.window_doc())
            self.state = "closed"
            return
        self._close_now()
        writer.write_meta(profile_window=self.window_doc())
        for a in self.arms:
            if a.error:
                writer.event("profile", a.error, arm=a.arm)
                self.say(f"profile: {a.name}: {a.error}")
        self.say("profile: reading the traces…")
        from abtui.profile.classes import table_from_dict
        from abtui.profile.stored import analyse_session

        traces = [self._traces(a) for a in self.arms]
        table = table_from_dict(self.pr.classes, "profile.classes")
        doc = analyse_session(traces, table, tuple(self.pr.optimises), self.pr.factor)
        writer.write_meta(profile=doc)
        for a in doc["arms"]:
            if a.get("error") and not any(x.error for x in self.arms if x.arm == a["arm"]):
                writer.event("profile", a["error"], arm=a["arm"])
                self.say(f"profile: {a['name']}: {a['error']}")

    def close(self) -> None:
        """Whatever happened (an error, Ctrl-C twice): an open window stopped, so no server is
        left profiling."""
        if self.state in ("starting", "open", "stopping"):
            self._close_now()

    # -- the traces -----------------------------------------------------------------------
    def _traces(self, a: _Arm) -> ArmTraces:
        from abtui.profile.stored import ArmTraces

        out = ArmTraces(a.arm, a.name, hardware=self.hardware[a.arm])
        if a.start_ns is None:
            out.error = a.error or "not profiled"
            return out
        given = self.pr.traces.get(a.name)
        places = [Path(given)] if given else []
        if not given and a.answered:
            places = [Path(p) for p in a.answered]
        if not places and self.pr.dir:
            d = Path(self.pr.dir)
            places = [d / a.name if (d / a.name).is_dir() else d]
        if not places:
            out.error = (
                "no trace: the server did not name one; give [profile] dir (--profile-dir) "
                "or --profile-trace ARM=PATH"
            )
            return out
        deadline = time.monotonic() + self.pr.wait_s
        while True:
            found = _find(places, a.started_wall, prefix_of(a.name))
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not found:
            where = ", ".join(str(p) for p in places)
            out.error = f"no trace file in {where} newer than the window ({self.pr.wait_s:g} s)"
        out.paths = [str(p) for p in found]
        return out


def prefix_of(arm: str) -> str:
    """The trace-file prefix abtui asks an arm's server for (vLLM's ``profile_prefix``: 1-128
    ASCII letters, digits, ``.``, ``_``, ``-``, a letter or digit first)."""
    return "abtui_" + re.sub(r"[^A-Za-z0-9._-]", "-", arm)[:100]


def _find(places: list[Path], since: float, prefix: str = "") -> list[Path]:
    """The trace files at ``places``: a file as it is; in a folder, those written since
    ``since`` (one per rank), in name order; those named with ``prefix`` when there are any
    (a folder several servers write to)."""
    found = _new_files(places, since)
    mine = [p for p in found if prefix and p.name.startswith((f"{prefix}_", f"{prefix}-"))]
    return mine or found


def _new_files(places: list[Path], since: float) -> list[Path]:
    out: list[Path] = []
    for p in places:
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                name = f.name.lower()
                if not f.is_file() or not name.endswith(TRACE_SUFFIXES):
                    continue
                try:
                    if f.stat().st_mtime >= since - 1.0:
                        out.append(f)
                except OSError:
                    continue
    return out
