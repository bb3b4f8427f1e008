"""Reading a spec: TOML → the typed model (:func:`load_spec`, :func:`spec_from_dict`), durations and
SLO strings, and error messages that name the file, the line and the field."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from abtui import limits
from abtui.errors import SpecError
from abtui.metrics.summary import SLO_KEYS
from abtui.quality.config import QualitySpec
from abtui.spec.model import (
    AblationSpec,
    ArmSpec,
    CostSpec,
    LoadSpec,
    PolicySpec,
    ProfileSpec,
    RaySpec,
    RequestSpec,
    Spec,
    StoreSpec,
    TelemetrySpec,
    WorkloadSpec,
)

# ---------------------------------------------------------------- parsing helpers

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m|min)?\s*$")
_UNIT = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}


def parse_duration(value: Any, where: str) -> float:
    """Seconds from ``500ms``, ``0.5s``, ``2m`` or a bare number (seconds)."""
    if isinstance(value, bool):
        raise SpecError(
            f"{where} must be a duration like '500ms' or a number of seconds, got {value!r}"
        )
    if isinstance(value, int | float):
        if not value >= 0 or math.isinf(value):
            raise SpecError(f"{where} must be a non-negative duration, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            seconds = float(m.group(1)) * _UNIT[m.group(2)]
            if not math.isfinite(seconds):
                raise SpecError(f"{where} must be a finite duration, got {value!r}")
            return seconds
    raise SpecError(
        f"{where} must be a duration like '500ms', '0.5s' or a number of seconds, got {value!r}"
    )


SLO_UNIT_HINT = "give a unit: ttft=500ms (or 0.5s); us, ms, s and m are known"


def slo_duration(value: Any, where: str) -> float:
    """An SLO's seconds: a string needs its unit (``500ms``, ``0.5s``), since ``ttft=500``
    silently meant 500 s; a TOML number is seconds, as for every duration."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m and m.group(2) is None:
            raise SpecError(f"{where}: {value.strip()!r} has no unit", SLO_UNIT_HINT)
    return parse_duration(value, where)


def parse_slo_string(text: str, where: str = "--slo") -> dict[str, float]:
    """``ttft=500ms,tpot=50ms`` → ``{"ttft": 0.5, "tpot": 0.05}``; a bare number is refused."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise SpecError(
                f"{where}: {part!r} is not KEY=DURATION", "e.g. --slo ttft=500ms,tpot=50ms"
            )
        out[key] = slo_duration(val.strip(), f"{where} {key}")
    _check_slo_keys(out, where)
    for key, v in out.items():
        _check_slo_value(key, v, where)
    return out


def _check_slo_value(key: str, value: float, where: str) -> None:
    try:
        limits.check("slo", value, f"slo.{key}")
    except limits.OutOfRange as e:
        raise SpecError(f"{where}: {e}") from None


def _check_slo_keys(slo: dict, where: str) -> None:
    for key in slo:
        if key not in SLO_KEYS:
            raise SpecError(f"{where}: unknown SLO {key!r}", f"known SLOs: {', '.join(SLO_KEYS)}")


def _type_name(t: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        t, str(t)
    )


def _coerce(value: Any, typ: str, where: str) -> Any:
    """Check a TOML value against a field's annotation (as a string, e.g. ``float | None``)."""
    kinds = [k.strip() for k in typ.split("|")]
    if value is None and "None" in kinds:
        return None
    for k in kinds:
        if k == "bool" and isinstance(value, bool):
            return value
        if k == "int" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if k == "float" and isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):  # TOML has nan and inf; no field takes them
                raise SpecError(f"{where} must be a finite number, got {value!r}")
            return float(value)
        if k == "str" and isinstance(value, str):
            return value
        if k == "dict" and isinstance(value, dict):
            return value
        if k == "list" and isinstance(value, list) and all(isinstance(x, str) for x in value):
            return value
        if (
            k in ("list[float]", "list[int]")
            and isinstance(value, list)
            and value
            and all(
                isinstance(x, int if k == "list[int]" else int | float)
                and not isinstance(x, bool)
                and math.isfinite(x)
                for x in value
            )
        ):
            return [float(x) for x in value] if k == "list[float]" else value
    wanted = " or ".join(
        _type_name(
            {"int": int, "float": float, "str": str, "bool": bool, "list": "a list of strings"}.get(
                k, k
            )
        )
        for k in kinds
        if k != "None"
    )
    raise SpecError(f"{where} must be {wanted}, got {type(value).__name__} {value!r}")


_DURATION_FIELDS = {
    "timeout_s",
    "read_timeout_s",
    "connect_timeout_s",
    "duration_s",
    "after_s",
    "wait_s",
}
_ALIASES = {
    "duration": "duration_s",
    "timeout": "timeout_s",
    "read_timeout": "read_timeout_s",
    "connect_timeout": "connect_timeout_s",
    "after": "after_s",
    "wait": "wait_s",
}


class _FieldError(SpecError):
    """A value out of its range, with the TOML path of its key (``section``, the index of an
    ``[[arms]]`` table or None, the key as written) so that :func:`load_spec` names its line."""

    def __init__(
        self,
        message: str,
        path: tuple[str, int | None, str],
        hint: str = "the ranges and their reasons: docs/reliability.md (Bounds)",
    ) -> None:
        super().__init__(message, hint)
        self.path = path


def _fill(cls: type, data: Any, where: str, section: str = "", index: int | None = None) -> Any:
    """Build dataclass ``cls`` from a TOML table, rejecting unknown keys, wrong types and
    numbers out of their range (:mod:`abtui.spec.bounds`). ``section``: the table's name
    (``"arm"`` for ``[[arms]]``, number ``index``)."""
    from abtui.spec.bounds import field_limit

    if not isinstance(data, dict):
        raise SpecError(f"{where} must be a table, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = _ALIASES.get(key, key)
        if name not in fields:
            raise SpecError(
                f"{where}: unknown key {key!r}",
                _suggest(key, [*fields, *(a for a, n in _ALIASES.items() if n in fields)]),
            )
        w = f"{where}.{key}" if where else key
        path = ("arms" if section == "arm" else section, index, key)
        try:
            if name in _DURATION_FIELDS:
                kwargs[name] = parse_duration(value, w)
            else:
                kwargs[name] = _coerce(value, str(fields[name].type), w)
        except SpecError as e:
            raise _FieldError(e.message, path, e.hint) from None
        row = field_limit(section, name)
        if row is not None and kwargs[name] is not None:
            try:
                limits.check(row, kwargs[name], w.rpartition(": ")[2])
            except limits.OutOfRange as e:
                raise _FieldError(f"{where.rpartition(': ')[0]}: {e}", path) from None
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        missing = [
            n
            for n, f in fields.items()
            if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
            and n not in kwargs
        ]
        raise SpecError(f"{where}: missing required key {', '.join(missing) or e}") from None


_SECTIONS = {
    "workload": WorkloadSpec,
    "load": LoadSpec,
    "request": RequestSpec,
    "store": StoreSpec,
    "cost": CostSpec,
    "policy": PolicySpec,
    "telemetry": TelemetrySpec,
    "quality": QualitySpec,
    "ablation": AblationSpec,
    "ray": RaySpec,
    "profile": ProfileSpec,
}


def spec_from_dict(data: dict, source: str = "spec") -> Spec:
    """Validate a parsed TOML document. ``source`` (the file name) prefixes every message."""
    spec = Spec()
    for key, value in data.items():
        where = f"{source}: {key}"
        if key == "name":
            spec.name = _coerce(value, "str", where)
        elif key == "arms":
            if not isinstance(value, list):
                raise SpecError(f"{where} must be an array of tables ([[arms]])")
            spec.arms = [
                _fill(ArmSpec, a, f"{source}: arms[{i}]", "arm", i) for i, a in enumerate(value)
            ]
        elif key == "slo":
            if not isinstance(value, dict):
                raise SpecError(f"{where} must be a table")
            spec.slo = {}
            for k, v in value.items():
                try:
                    spec.slo[k] = limits.check(
                        "slo", slo_duration(v, f"{source}: slo.{k}"), f"slo.{k}"
                    )
                except SpecError as e:
                    raise _FieldError(e.message, ("slo", None, k), e.hint) from None
                except limits.OutOfRange as e:
                    raise _FieldError(f"{source}: {e}", ("slo", None, k)) from None
            _check_slo_keys(spec.slo, f"{source}: slo")
        elif key in _SECTIONS:
            setattr(spec, key, _fill(_SECTIONS[key], value, f"{source}: {key}", key))
            if key == "profile" and "enabled" not in value:  # the table asks for a profile
                spec.profile.enabled = True
        else:
            raise SpecError(
                f"{source}: unknown key {key!r}",
                _suggest(key, ["name", "arms", "slo", *_SECTIONS], "top-level keys"),
            )
    return spec


def _suggest(key: str, known: list[str], what: str = "keys here") -> str:
    """The hint for an unknown key: the closest known one first, then them all."""
    import difflib

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    every = f"known {what}: {', '.join(sorted(set(known)))}"
    return f"did you mean {close[0]!r}? {every}" if close else every


def _line_of(text: str, message: str) -> int | None:
    """The line of the key an ``unknown key 'k'`` message is about (its first ``k =`` or ``[k]``
    in the file), so the error names FILE:LINE."""
    import re

    m = re.search(r"unknown key '([^']+)'", message)
    if not m:
        return None
    k = re.escape(m[1])
    pat = re.compile(rf"""^\s*(?:["']?{k}["']?\s*=|\[\[?\s*["']?{k}["']?\s*\]\]?)""")
    for i, line in enumerate(text.splitlines(), 1):
        if pat.match(line):
            return i
    return None


def _line_of_field(text: str, section: str, index: int | None, key: str) -> int | None:
    """The line of ``key`` in table ``[section]`` (the ``index``-th ``[[section]]``); else its
    first ``key =`` anywhere (a dotted key, an inline table)."""
    header = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    assign = re.compile(rf"""^\s*(?:[\w.]*\.)?["']?{re.escape(key)}["']?\s*=""")
    lines = text.splitlines()
    current, seen = None, -1
    for i, line in enumerate(lines, 1):
        m = header.match(line)
        if m:
            current = m[1].strip().strip("\"'")
            seen += current == section
            continue
        if current == section and (index is None or seen == index) and assign.match(line):
            return i
    anywhere = re.compile(rf"""(^|[\s{{,.])["']?{re.escape(key)}["']?\s*=""")
    return next((i for i, line in enumerate(lines, 1) if anywhere.search(line)), None)


def load_spec(path: str | Path) -> tuple[Spec, str]:
    """Read and validate a TOML spec file; returns the spec and the file's text."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SpecError(f"spec file {p} does not exist") from None
    except OSError as e:
        raise SpecError(f"cannot read spec file {p}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise SpecError(
            f"{p}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x})", "TOML files are UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML: {e}", "check the line and column named") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid TOML: arrays or tables nested too deeply") from None
    try:
        return spec_from_dict(data, str(p)), text
    except _FieldError as e:
        line = _line_of_field(text, *e.path)
        if line is None or not e.message.startswith(f"{p}: "):
            raise
        raise SpecError(f"{p}:{line}: {e.message[len(str(p)) + 2 :]}", e.hint) from None
    except SpecError as e:
        line = _line_of(text, e.message)
        if line is None or not e.message.startswith(f"{p}: "):
            raise
        raise SpecError(f"{p}:{line}: {e.message[len(str(p)) + 2 :]}", e.hint) from None
