"""Reading a spec: TOML → the typed model (:func:`load_spec`, :func:`spec_from_dict`), durations and
SLO strings, and error messages that name the file, the line and the field."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from abtui.errors import SpecError
from abtui.metrics.summary import SLO_KEYS
from abtui.quality.config import QualitySpec
from abtui.spec.model import (
    AblationSpec,
    ArmSpec,
    CostSpec,
    LoadSpec,
    PolicySpec,
    RaySpec,
    RequestSpec,
    Spec,
    StoreSpec,
    TelemetrySpec,
    WorkloadSpec,
)  # fmt: skip

# ---------------------------------------------------------------- parsing helpers

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m|min)?\s*$")
_UNIT = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}


def parse_duration(value: Any, where: str) -> float:
    """Seconds from ``500ms``, ``0.5s``, ``2m`` or a bare number (seconds)."""
    if isinstance(value, bool):
        raise SpecError(f"{where} must be a duration like '500ms' or a number of seconds, got {value!r}")
    if isinstance(value, int | float):
        if not value >= 0 or math.isinf(value):
            raise SpecError(f"{where} must be a non-negative duration, got {value!r}")
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNIT[m.group(2)]
    raise SpecError(
        f"{where} must be a duration like '500ms', '0.5s' or a number of seconds, got {value!r}"
    )


def parse_slo_string(text: str, where: str = "--slo") -> dict[str, float]:
    """``ttft=500ms,tpot=50ms`` → ``{"ttft": 0.5, "tpot": 0.05}``."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep:
            raise SpecError(f"{where}: {part!r} is not KEY=DURATION", "e.g. --slo ttft=500ms,tpot=50ms")
        out[key] = parse_duration(val.strip(), f"{where} {key}")
    _check_slo_keys(out, where)
    return out


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
            return float(value)
        if k == "str" and isinstance(value, str):
            return value
        if k == "dict" and isinstance(value, dict):
            return value
        if k == "list" and isinstance(value, list) and all(isinstance(x, str) for x in value):
            return value
        if k in ("list[float]", "list[int]") and isinstance(value, list) and value and all(
            isinstance(x, int if k == "list[int]" else int | float) and not isinstance(x, bool)
            for x in value
        ):
            return [float(x) for x in value] if k == "list[float]" else value
    wanted = " or ".join(
        _type_name({"int": int, "float": float, "str": str, "bool": bool, "list": "a list of strings"}.get(k, k))
        for k in kinds
        if k != "None"
    )
    raise SpecError(f"{where} must be {wanted}, got {type(value).__name__} {value!r}")


_DURATION_FIELDS = {"timeout_s", "read_timeout_s", "connect_timeout_s", "duration_s"}
_ALIASES = {"duration": "duration_s", "timeout": "timeout_s", "read_timeout": "read_timeout_s", "connect_timeout": "connect_timeout_s"}


def _fill(cls: type, data: Any, where: str) -> Any:
    """Build dataclass ``cls`` from a TOML table, rejecting unknown keys and wrong types."""
    if not isinstance(data, dict):
        raise SpecError(f"{where} must be a table, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = _ALIASES.get(key, key)
        if name not in fields:
            raise SpecError(f"{where}: unknown key {key!r}", _suggest(
                key, [*fields, *(a for a, n in _ALIASES.items() if n in fields)]))
        w = f"{where}.{key}" if where else key
        if name in _DURATION_FIELDS:
            kwargs[name] = parse_duration(value, w)
        else:
            kwargs[name] = _coerce(value, str(fields[name].type), w)
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING and n not in kwargs]
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
            spec.arms = [_fill(ArmSpec, a, f"{source}: arms[{i}]") for i, a in enumerate(value)]
        elif key == "slo":
            if not isinstance(value, dict):
                raise SpecError(f"{where} must be a table")
            spec.slo = {k: parse_duration(v, f"{source}: slo.{k}") for k, v in value.items()}
            _check_slo_keys(spec.slo, f"{source}: slo")
        elif key in _SECTIONS:
            setattr(spec, key, _fill(_SECTIONS[key], value, f"{source}: {key}"))
        else:
            raise SpecError(f"{source}: unknown key {key!r}",
                            _suggest(key, ["name", "arms", "slo", *_SECTIONS], "top-level keys"))  # fmt: skip
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
        raise SpecError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x})",
                        "TOML files are UTF-8") from None  # fmt: skip
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{p}: not valid TOML: {e}", "check the line and column named") from None
    except RecursionError:
        raise SpecError(f"{p}: not valid TOML: arrays or tables nested too deeply") from None
    try:
        return spec_from_dict(data, str(p)), text
    except SpecError as e:
        line = _line_of(text, e.message)
        if line is None or not e.message.startswith(f"{p}: "):
            raise
        raise SpecError(f"{p}:{line}: {e.message[len(str(p)) + 2:]}", e.hint) from None
