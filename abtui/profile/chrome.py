"""PyTorch profiler / Kineto Chrome-trace JSON: what ``torch.profiler`` exports
(``export_chrome_trace``, ``tensorboard_trace_handler``), so what vLLM's and SGLang's
``/start_profile`` write (``*.pt.trace.json.gz``).

Followed: the Trace Event Format's complete events (``"ph": "X"``, ``ts``/``dur`` in µs,
``pid``/``tid``) as Kineto writes them (``schemaVersion`` 1; checked on torch 2.13's CPU
traces and vLLM 0.32's profiler code). Read:

- ``cat`` ``kernel``, ``gpu_memcpy``, ``gpu_memset``: the device's activities, on lanes
  ``pid`` (device) / ``tid`` (stream); ``args.correlation`` ties each to its launch;
- ``cuda_runtime`` / ``cuda_driver``: the launch calls (their ``ts`` places a kernel in a step);
- ``cpu_op``: host operators (``aten::…``, custom ops), counted by self time when the trace
  has no device activity (a CPU build's trace);
- ``user_annotation`` / ``gpu_user_annotation``: ``record_function`` ranges on the host and
  their projection on the device lanes: the steps (:mod:`abtui.profile.phases`).

Everything else (python functions, instant and metadata events, flows) is skipped.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

from abtui.profile.model import Activity, ProfileError, Trace
from abtui.profile.phases import find_steps

_DEVICE = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_LAUNCH = ("cuda_runtime", "cuda_driver")
_RANGES = ("user_annotation", "gpu_user_annotation")
_WANTED = frozenset([*_DEVICE, "cpu_op", *_LAUNCH, *_RANGES])
_EPS = 0.002  # µs: Kineto rounds to the nanosecond
_DEPTH = 8  # enclosing operators kept per operator


def _what(v: object) -> str:
    return "missing" if v is None else f"{type(v).__name__} {str(v)[:40]!r}"


class _Events:
    """One pass over ``traceEvents``: the events this reader uses, checked field by field."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.device: list[tuple[str, str, float, float, str, object]] = []
        self.ops: list[tuple[str, float, float, str]] = []  # (name, start, end, lane)
        self.launch: dict[object, float] = {}
        self.ranges: dict[str, list[tuple[str, float, float]]] = defaultdict(list)

    def _num(self, ev: dict, key: str, i: int) -> float:
        v = ev.get(key)
        t = type(v)
        if (t is float or t is int) and v - v == 0:  # the common case: a finite number
            return float(v)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ProfileError(
                f"{self.where}: traceEvents[{i}] ({str(ev.get('name'))[:60]}): field "
                f"{key!r} is {_what(v)}, not a number"
            )
        return float(v)

    def add(self, i: int, ev: object) -> None:
        if not isinstance(ev, dict):
            raise ProfileError(f"{self.where}: traceEvents[{i}] is {_what(ev)}, not an object")
        if ev.get("ph") != "X":
            return
        cat = ev.get("cat")
        if type(cat) is not str:
            return
        if cat not in _WANTED:
            cat = cat.lower()
            if cat not in _WANTED:
                return
        name = ev.get("name")
        if not isinstance(name, str):
            raise ProfileError(f"{self.where}: traceEvents[{i}]: field 'name' is {_what(name)}")
        ts, dur = self._num(ev, "ts", i), self._num(ev, "dur", i)
        if dur < 0:
            raise ProfileError(f"{self.where}: traceEvents[{i}] ({name[:60]}): 'dur' < 0")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        lane = f"{ev.get('pid')}/{ev.get('tid')}"
        corr = args.get("correlation")
        corr = corr if isinstance(corr, int | str) and not isinstance(corr, bool) else None
        if cat in _DEVICE:
            self.device.append((name, _DEVICE[cat], ts, ts + dur, lane, corr))
        elif cat == "cpu_op":
            self.ops.append((name, ts, ts + dur, lane))
        elif cat in _LAUNCH:
            if corr is not None:
                self.launch[corr] = ts
        else:
            self.ranges[cat].append((name, ts, ts + dur))


def self_times(ops: list[tuple[str, float, float, str]]) -> list[Activity]:
    """Host operators with ``busy`` their self time: on each lane, a fully nested operator's
    duration comes off its parent's; one that overlaps without nesting starts a new top
    level. Each keeps its enclosing operators' names (:attr:`Activity.parents`)."""
    out: list[Activity] = []
    by_lane: dict[str, list[tuple[str, float, float, str]]] = defaultdict(list)
    for op in ops:
        by_lane[op[3]].append(op)
    for lane_ops in by_lane.values():
        lane_ops.sort(key=lambda o: (o[1], -o[2]))
        busy = [o[2] - o[1] for o in lane_ops]
        parents: list[tuple[str, ...]] = []
        stack: list[int] = []
        for i, (_n, start, end, _l) in enumerate(lane_ops):
            while stack and lane_ops[stack[-1]][2] <= start + _EPS:
                stack.pop()
            if stack and end <= lane_ops[stack[-1]][2] + _EPS:
                busy[stack[-1]] -= end - start
                parents.append(tuple(lane_ops[j][0] for j in reversed(stack[-_DEPTH:])))
            else:
                stack.clear()  # overlaps without nesting: a new top level
                parents.append(())
            stack.append(i)
        out += [
            Activity(n, "op", s, e, max(0.0, b), lane, None, up)
            for (n, s, e, lane), b, up in zip(lane_ops, busy, parents, strict=True)
        ]
    return out


def parse_chrome(data: object, where: str) -> Trace:
    """A Trace from a parsed Chrome-trace document (an object with ``traceEvents``, or the
    bare array form)."""
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        events = data["traceEvents"]
    elif isinstance(data, list):
        events, data = data, {}
    else:
        raise ProfileError(
            f"{where}: no 'traceEvents' list: not a Chrome trace",
            "torch.profiler's export_chrome_trace or vLLM's torch_profiler_dir writes one",
        )
    seen = _Events(where)
    for i, ev in enumerate(events):
        seen.add(i, ev)
    version = f"Kineto schemaVersion {str(data.get('schemaVersion', '?'))[:20]}"
    notes = _notes(data)
    if seen.device:
        acts = [
            Activity(n, k, s, e, e - s, lane, seen.launch.get(c) if c is not None else None)
            for n, k, s, e, lane, c in seen.device
        ]
        side = "device"
    else:
        acts, side = self_times(seen.ops), "host"
    acts.sort(key=lambda a: a.start)
    return Trace(
        path=where,
        format="chrome",
        version=version,
        side=side,
        timeline=True,
        activities=acts,
        steps=find_steps(seen.ranges["user_annotation"]),
        device_steps=find_steps(seen.ranges["gpu_user_annotation"]),
        notes=notes,
    )


def _notes(data: dict) -> list[str]:
    notes = []
    version = data.get("vllm_version")
    if isinstance(version, str):
        notes.append(f"vLLM {version.strip(chr(34))[:40]}")
    devices = data.get("deviceProperties")
    if isinstance(devices, list):
        names = {str(d.get("name"))[:60] for d in devices if isinstance(d, dict) and "name" in d}
        notes += sorted(names)
    return notes


def read_chrome(raw: bytes, where: str) -> Trace:
    """Parse the (decompressed) bytes of a Chrome-trace file."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ProfileError(
            f"{where}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg})",
            "a trace cut short (a server stopped while writing it) reads like this",
        ) from None
    except (UnicodeDecodeError, RecursionError, ValueError) as e:
        raise ProfileError(f"{where}: not a JSON text ({type(e).__name__})") from None
    return parse_chrome(data, where)
