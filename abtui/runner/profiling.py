"""A profiling window during a session (``abtui run --profile``, the spec's ``[profile]``);
with a load sweep, one window in each level.

Once the measured phase (a sweep: each level) has run ``after_s`` (warm-up done), every arm's
server is asked to profile — ``POST /start_profile`` at the server's root (the arm's URL
without ``/v1``), as vLLM (started with ``--profiler-config``), SGLang and ``abtui sim serve``
serve it — and ``duration_s`` later (or when the load, or the level, ends first) ``POST
/stop_profile``. The calls run in a thread of their own, every arm at once, so the session's
message loop never waits on a server writing its trace (vLLM's stop takes seconds). One window
at a time: a level's opens once the one before it has stopped.

The window, per arm from just before its start call to just after its stop call returned, is
stored as the ``profile_window`` meta key (a sweep: ``profile_windows``, one per level) after
the load (:mod:`abtui.store.profiled` leaves the items that ran in it out of the latency
figures). Then the traces are picked up — the path ``/stop_profile`` answered (the
simulator's), ``--profile-trace ARM=PATH``, or the files new in ``[profile] dir`` (a level's:
those written before the next level's window opened) — analysed (:mod:`abtui.profile.stored`)
and stored as the ``profile`` meta key (a sweep: ``profiles``, one per level), so the reports
need the traces no more.
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


@dataclass
class _Window:
    """One window: a sweep's level (0 without a sweep) and each arm's times in it."""

    level: int
    arms: list[_Arm]
    state: str = "waiting"  # → starting → open → stopping → closed
    opened_ns: int | None = None
    rate: float | None = None
    concurrency: int | None = None
    thread: threading.Thread | None = None


class ProfileWindow:
    """The windows of one session, one per sweep level (one without a sweep; see the module
    docstring). ``tick`` from the message loop, ``finish`` after the load, ``close`` whatever
    happened."""

    def __init__(self, spec: Spec, targets: list[Target], say) -> None:
        self.pr = spec.profile
        self.say = say
        ld = spec.load
        n_levels = len(ld.sweep_rate or ld.sweep_concurrency or [None])
        self.sweep = n_levels > 1
        self.wins = [
            _Window(
                k,
                [
                    _Arm(i, a.name, _root(a.url), t)
                    for i, (a, t) in enumerate(zip(spec.arms, targets, strict=True))
                ],
            )
            for k in range(n_levels)
        ]
        self.k = 0  # the window opened next (or in flight)
        self.taken: set[str] = set()  # trace files an earlier level's window read
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

    def _all(self, w: _Window, fn, then: str) -> None:
        threads = [threading.Thread(target=fn, args=(a,), daemon=True) for a in w.arms]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.state = then

    def _in_background(self, w: _Window, fn, then: str) -> None:
        w.thread = threading.Thread(target=self._all, args=(w, fn, then), daemon=True)
        w.thread.start()

    # -- driven by the session -----------------------------------------------------------
    def tick(self, conductor, now_ns: int, stopping: bool) -> None:
        """Open a level's window ``after_s`` into the level (the ``conductor``'s first segment
        of it: its ``t0``; without a sweep, the measured phase's), close it ``duration_s``
        after it opened or when its level ended; nothing new once a stop was asked
        (``stopping``). One window at a time: the next level's waits for this one's stop."""
        if self.k >= len(self.wins):
            return
        w = self.wins[self.k]
        log = conductor.log if conductor is not None else []
        if w.state == "open":
            ended = self.sweep and _level_ended(log, w.level)
            if stopping or ended or now_ns >= (w.opened_ns or now_ns) + self.pr.duration_s * 1e9:
                w.state = "stopping"
                self._in_background(w, self._stop_one, "closed")
        elif w.state == "closed":
            self.k += 1
        elif w.state == "waiting" and not stopping:
            first = _level_start(log, w.level)
            if first is None:
                return
            if self.sweep and _level_ended(log, w.level):
                self.k += 1  # the level ended before its window was due
                return
            if now_ns >= first["t0_ns"] + self.pr.after_s * 1e9:
                w.state = "starting"
                w.opened_ns = now_ns
                w.rate, w.concurrency = first.get("rate"), first.get("concurrency")
                self._in_background(w, self._start_one, "open")

    @property
    def active(self) -> bool:
        """A window is open (or being opened or closed) now: the live header says so."""
        return any(w.state in ("starting", "open", "stopping") for w in self.wins)

    def _close_now(self, w: _Window) -> None:
        if w.thread is not None:
            w.thread.join()
        if w.state == "open":
            w.state = "stopping"
            self._all(w, self._stop_one, "closed")

    def windows(self) -> list[tuple[int, int, int]]:
        """``(arm, start_ns, end_ns)`` of each window opened so far; one still open ends at
        the largest time (every request so far may have run in it)."""
        return [
            (a.arm, a.start_ns, a.end_ns if a.end_ns is not None else (1 << 63) - 1)
            for w in self.wins
            for a in w.arms
            if a.start_ns is not None
        ]

    def window_doc(self, w: _Window) -> dict:
        doc: dict = {"level": w.level, "rate": w.rate, "concurrency": w.concurrency}
        doc = doc if self.sweep else {}  # without a sweep: the one window, as it always was
        return doc | {
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
                for a in w.arms
            ],
        }

    def finish(self, writer) -> None:
        """After the load: the windows closed (if still open) and stored, the traces picked
        up, analysed and stored: ``profile_window`` and ``profile`` without a sweep, else
        ``profile_windows`` and ``profiles`` (a list each, one entry per level profiled)."""
        for w in self.wins:
            self._close_now(w)
        opened = [w for w in self.wins if w.state != "waiting"]
        missed = [w.level + 1 for w in self.wins if w.state == "waiting"]
        if missed and not self.sweep:
            self.say(
                "profile: the load ended before the window opened "
                f"({self.pr.after_s:g} s into the measured phase)"
            )
            writer.event("profile", "the load ended before the profiling window opened")
        elif missed:
            what = f"no profiling window in level {_levels(missed)}"
            self.say(
                f"profile: {what}: the load left it before its window was due "
                f"({self.pr.after_s:g} s into the level)"
            )
            writer.event("profile", what)
        if not self.sweep:
            writer.write_meta(profile_window=self.window_doc(self.wins[0]))
            if opened:
                writer.write_meta(profile=self._analysed(opened[0], writer))
            return
        writer.write_meta(profile_windows=[self.window_doc(w) for w in opened])
        docs = []
        for w in opened:
            doc = {"level": w.level, "rate": w.rate, "concurrency": w.concurrency}
            docs.append(doc | self._analysed(w, writer))
        writer.write_meta(profiles=docs)

    def _analysed(self, w: _Window, writer) -> dict:
        """The window's errors told, its traces read and analysed."""
        for a in w.arms:
            if a.error:
                writer.event("profile", a.error, arm=a.arm)
                self.say(f"profile: {a.name}: {a.error}")
        self.say("profile: reading the traces…")
        from abtui.profile.classes import table_from_dict
        from abtui.profile.stored import analyse_session

        nxt = self.wins[w.level + 1] if w.level + 1 < len(self.wins) else None
        traces = [self._traces(a, nxt.arms[a.arm] if nxt else None) for a in w.arms]
        table = table_from_dict(self.pr.classes, "profile.classes")
        doc = analyse_session(traces, table, tuple(self.pr.optimises), self.pr.factor)
        for a in doc["arms"]:
            if a.get("error") and not any(x.error for x in w.arms if x.arm == a["arm"]):
                writer.event("profile", a["error"], arm=a["arm"])
                self.say(f"profile: {a['name']}: {a['error']}")
        return doc

    def close(self) -> None:
        """Whatever happened (an error, Ctrl-C twice): an open window stopped, so no server is
        left profiling."""
        for w in self.wins:
            if w.state in ("starting", "open", "stopping"):
                self._close_now(w)

    # -- the traces -----------------------------------------------------------------------
    def _traces(self, a: _Arm, nxt: _Arm | None = None) -> ArmTraces:
        """``a``'s trace files; in a folder, those written before ``nxt`` (the arm in the next
        level's window) started and not read by an earlier level's window."""
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
            until = nxt.started_wall if nxt is not None and nxt.started_wall else None
            found = _find(places, a.started_wall, prefix_of(a.name), until)
            # a folder's file an earlier level read is that level's (a file named outright
            # is read as it is)
            found = [p for p in found if p in places or str(p) not in self.taken]
            if found or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not found:
            where = ", ".join(str(p) for p in places)
            out.error = f"no trace file in {where} newer than the window ({self.pr.wait_s:g} s)"
        out.paths = [str(p) for p in found]
        if self.sweep:
            self.taken.update(out.paths)
        return out


def prefix_of(arm: str) -> str:
    """The trace-file prefix abtui asks an arm's server for (vLLM's ``profile_prefix``: 1-128
    ASCII letters, digits, ``.``, ``_``, ``-``, a letter or digit first)."""
    return "abtui_" + re.sub(r"[^A-Za-z0-9._-]", "-", arm)[:100]


def _find(
    places: list[Path], since: float, prefix: str = "", until: float | None = None
) -> list[Path]:
    """The trace files at ``places``: a file as it is; in a folder, those written since
    ``since`` (and before ``until``: the next window's) (one per rank), in name order; those
    named with ``prefix`` when there are any (a folder several servers write to)."""
    found = _new_files(places, since, until)
    mine = [p for p in found if prefix and p.name.startswith((f"{prefix}_", f"{prefix}-"))]
    return mine or found


def _new_files(places: list[Path], since: float, until: float | None = None) -> list[Path]:
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
                    t = f.stat().st_mtime
                    if t >= since - 1.0 and (until is None or t < until):
                        out.append(f)
                except OSError:
                    continue
    return out


def _level_start(log: list[dict], level: int) -> dict | None:
    """The segments record's first entry of ``level`` (None: not played yet)."""
    return next((e for e in log if e.get("level", 0) == level and "t0_ns" in e), None)


def _level_ended(log: list[dict], level: int) -> bool:
    """Whether the load has left ``level`` (the first time it played): a segment of another
    level started after it."""
    seen = False
    for e in log:
        if e.get("level", 0) == level:
            seen = True
        elif seen:
            return True
    return False


def _levels(ks: list[int]) -> str:
    return ", ".join(str(k) for k in ks)
