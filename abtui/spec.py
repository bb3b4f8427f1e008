"""The experiment spec: arms, workload, load, SLOs, request settings, storage.

One typed model, loaded from TOML (``abtui run spec.toml``) and/or command-line flags (flags
override the file). Every field has a docstring-comment; validation names the file and the field.

Example::

    name = "fp8-vs-bf16"

    [[arms]]
    name = "bf16"
    role = "baseline"
    url = "http://127.0.0.1:8001/v1"

    [[arms]]
    name = "fp8"
    url = "http://127.0.0.1:8002/v1"
    api_key_env = "FP8_API_KEY"     # the variable's name; the key itself is never stored

    [workload]
    requests = 200
    input_tokens = 512
    output_tokens = 128

    [load]
    rate = 20                       # requests/s; omit for closed loop with `concurrency`
    arrival = "poisson"

    [slo]
    ttft = "500ms"
    tpot = "50ms"
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abtui.errors import SpecError
from abtui.metrics.summary import SLO_KEYS
from abtui.quality.config import QualitySpec, validate_quality

APIS = ("completions", "chat")
ARRIVALS = ("constant", "poisson", "gamma", "replay")
HTTP_CLIENTS = ("fast", "httpx")
MAX_ARMS = 32  # each arm is a load-generator process (or more) and a column of every table


@dataclass
class ArmSpec:
    name: str
    """Short label shown in every table (e.g. ``bf16``, ``fp8``)."""
    url: str
    """Base URL of the OpenAI-compatible API, ending in ``/v1``."""
    role: str = "candidate"
    """``baseline`` (exactly one arm, the first by default) or ``candidate``."""
    model: str | None = None
    """Model name to send; default: the first model the endpoint lists at ``/v1/models``."""
    api: str | None = None
    """``completions`` or ``chat``; default: ``request.api``."""
    api_key_env: str | None = None
    """Name of the environment variable holding this arm's API key (sent as a Bearer token)."""
    params: dict = field(default_factory=dict)
    """Extra fields merged into every request body for this arm (engine-specific knobs)."""
    gpu_price: float | None = None
    """USD per GPU-hour of this arm (overrides ``[cost] gpu_price``)."""
    gpus: int | None = None
    """GPUs this arm uses (overrides ``[cost] gpus``)."""
    metrics_url: str | None = None
    """This arm's Prometheus ``/metrics`` (vLLM, SGLang, TGI, llama.cpp, DCGM exporter), scraped every
    ``telemetry.interval_s``; default ``http://host:port/metrics`` of ``url``; ``"off"``: none."""
    gpu_index: int | str | None = None
    """Local GPU(s) serving this arm, by NVML index (``0``, or ``"0,1"`` for tensor parallel)."""
    gpu: str | None = None
    """GPU model for the roofline and MBU (``h100-sxm``, ``a100-80gb``, …: ``abtui roofline``)."""
    model_preset: str | None = None
    """Model for the roofline, a preset name (``llama-3-8b``, …)."""
    model_config: str | None = None
    """Model for the roofline, a Hugging Face ``config.json`` (instead of ``model_preset``)."""
    dtype: str | None = None
    """Weight dtype for the roofline: bf16, fp16, fp8, int8 or int4 (default bf16)."""
    kv_dtype: str | None = None
    """KV-cache dtype for the roofline (default bf16)."""
    insecure: bool = False
    """``https`` without certificate checks (``--insecure``): stored and warned about."""
    ca_bundle: str | None = None
    """A PEM file of the private CA that signed this endpoint's certificate (``--ca-bundle``),
    trusted on top of the system's (verification stays on)."""


@dataclass
class WorkloadSpec:
    requests: int | None = None
    """Number of measured requests per arm (warm-up not included); default 200, or every item
    of ``file``."""
    input_tokens: int = 512
    """Prompt length of the synthetic workload, in tokens (about one word each)."""
    output_tokens: int = 128
    """``max_tokens`` of every request."""
    seed: int = 0
    """Seed of the synthetic prompts and of the arrival schedule: same seed, same workload."""
    file: str | None = None
    """A workload file in abtui's JSONL format (``abtui workload import`` writes it from traces);
    ``requests`` then takes the first N of its items (default: all)."""
    skip_bad: bool = False
    """Skip (and count) malformed lines of ``file`` instead of stopping at the first one."""
    input_dist: str | None = None
    """Prompt lengths: ``fixed:N``, ``uniform:LO:HI``, ``normal:MEAN:SD``, ``lognormal:MEDIAN:SIGMA``
    or ``trace:FILE`` (sampled from a workload file); default ``fixed:<input_tokens>``."""
    output_dist: str | None = None
    """``max_tokens`` distribution, same grammar; default ``fixed:<output_tokens>``."""
    prefix_groups: int = 0
    """Shared-prefix groups: item i starts with group (i mod N)'s prefix (0: no sharing)."""
    prefix_tokens: int = 0
    """Length of each group's shared prefix, in tokens (part of the prompt length)."""


@dataclass
class LoadSpec:
    rate: float | None = None
    """Open loop: requests/s offered to every arm. ``None``: closed loop with ``concurrency``."""
    arrival: str = "poisson"
    """Open-loop arrival process: ``poisson`` (seeded), ``constant``, ``gamma`` (seeded, with
    ``burstiness``) or ``replay`` (the workload file's own offsets, divided by ``speedup``)."""
    burstiness: float = 1.0
    """``gamma`` arrivals: coefficient of variation of the gaps (1 = Poisson, > 1 bursty)."""
    speedup: float = 1.0
    """``replay``: play the file's timestamps this many times faster."""
    sweep_rate: list[float] | None = None
    """A sweep: these rates (req/s), each level its own segment with its own items."""
    sweep_concurrency: list[int] | None = None
    """A sweep of closed-loop concurrencies, each level its own segment."""
    runs: int = 1
    """Repeat the whole schedule this many times (``--runs k``); requests pair by (run, item)."""
    schedule: str = "parallel"
    """``parallel`` (arms on separate hardware: same instants) or ``alternate`` (arms sharing
    one GPU: they take turns over ``blocks`` blocks of the schedule, A B B A …)."""
    blocks: int = 4
    """``alternate``: blocks per level and run."""
    duration_s: float | None = None
    """Longest measured phase of each segment (``duration = "60s"``): open loop, the requests
    scheduled within it (with no ``requests`` given, as many as the rate brings); closed loop,
    no new request after it. ``requests`` still caps the count."""
    generators: int = 1
    """Load-generator processes per arm (each sends every n-th request of the same schedule),
    for rates one core cannot keep (scripts/bench_loadgen.py measures it)."""
    concurrency: int | None = None
    """Closed loop: requests kept in flight per arm. With ``rate``: a cap on in-flight requests."""
    warmup: int = 2
    """Warm-up requests per arm before the measured schedule; stored, excluded from results."""


@dataclass
class RequestSpec:
    api: str = "completions"
    """Default API of the arms: ``completions`` (``/v1/completions``) or ``chat``."""
    temperature: float = 0.0
    """Sampling temperature sent to every arm (0 = greedy, as latency A/B runs should be)."""
    seed: int | None = 0
    """``seed`` sent to every arm (``None`` to leave it out)."""
    ignore_eos: bool = True
    """Send ``ignore_eos`` (vLLM/SGLang) so every request generates exactly ``max_tokens``."""
    timeout_s: float = 600.0
    """Whole-request timeout, seconds."""
    read_timeout_s: float = 120.0
    """Longest silence allowed between two reads of a stream, seconds."""
    connect_timeout_s: float = 10.0
    """Connect timeout, seconds."""
    http: str = "fast"
    """Streaming client: ``fast`` (abtui's asyncio hot path, the default) or ``httpx``."""


@dataclass
class TelemetrySpec:
    interval_s: float = 1.0
    """Seconds between two telemetry samples (server ``/metrics`` and local GPUs)."""
    scrape: bool = True
    """Scrape each arm's ``/metrics`` (``metrics_url``, default derived from ``url``)."""
    nvml: bool = True
    """Sample the local GPUs named by the arms' ``gpu_index`` through NVML."""


@dataclass
class StoreSpec:
    dir: str = "sessions"
    """Folder of session files."""
    text: bool = True
    """Store each request's generated text (``--no-store-text`` to leave it out)."""


@dataclass
class CostSpec:
    gpu_price: float | None = None
    """USD per GPU-hour for every arm (``--gpu-price``); unset: no cost figures."""
    gpus: int = 1
    """GPUs per arm (``--gpus``)."""


@dataclass
class RaySpec:
    address: str | None = None
    """Run the load generators as Ray actors on this cluster (``--ray``): ``auto``,
    ``ray://HEAD:10001``, ``HOST:6379``. Unset: local processes, and Ray is never imported."""
    placement: str = "spread"
    """``spread`` the generators over the nodes, or ``pack`` them on as few as fit."""
    cpus_per_generator: float = 1.0
    """Ray CPUs each generator actor reserves (its placement-group share)."""
    clock_warn_ms: float = 2.0
    """A node clock offset known less precisely than this (± ms) is a named warning."""


DEFAULT_GUARDRAILS = ("ttft.p50", "ttft.p99", "tpot.p50", "tpot.p99", "e2e.p99")


@dataclass
class PolicySpec:
    primary: str = "e2e.p50"
    """The objective that must be IMPROVED for GO, as ``metric.stat`` (e.g. ``tpot.p50``,
    ``goodput.output_tokens``, ``cost.per_mtok_good``)."""
    guardrails: list = field(default_factory=lambda: list(DEFAULT_GUARDRAILS))
    """Effects that must not be REGRESSED (one regressed: NO-GO)."""
    alpha: float = 0.05
    """Significance level (Holm over primary + guardrails, Benjamini–Hochberg over the rest)."""
    delta: float = 0.02
    """Noise threshold δ for means, medians, throughput, goodput and cost (0.02 = 2%)."""
    delta_tail: float = 0.05
    """Noise threshold δ for P90 / P95 / P99."""
    resamples: int = 10_000
    """Bootstrap resamples."""
    seed: int = 0
    """Seed of the bootstrap (same seed, same verdict)."""
    noise_floor: str | None = None
    """An A/A session (``abtui run --aa``) whose measured noise raises δ per metric."""


@dataclass
class AblationSpec:
    factors: list = field(default_factory=list)
    """A 2^k factorial ablation (k = 2 or 3): the factors' names, e.g. ``["fp8", "spec"]``; the
    arms are then named by the factors they switch on (``fp8``, ``spec``, ``fp8+spec``), the
    baseline has every factor off, and the verdict adds each factor's main effect and their
    interactions (docs/ablation.md). Empty: no factorial (the arms are a ladder)."""


@dataclass
class Spec:
    name: str | None = None
    """Session name; the file is ``<store.dir>/<name>.duckdb``. Default: a timestamp."""
    arms: list[ArmSpec] = field(default_factory=list)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    slo: dict[str, float] = field(default_factory=dict)
    """Per-request SLOs in seconds: ttft, ttft_user, tpot, itl (largest gap), e2e."""
    request: RequestSpec = field(default_factory=RequestSpec)
    store: StoreSpec = field(default_factory=StoreSpec)
    cost: CostSpec = field(default_factory=CostSpec)
    policy: PolicySpec = field(default_factory=PolicySpec)
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    quality: QualitySpec = field(default_factory=QualitySpec)
    ablation: AblationSpec = field(default_factory=AblationSpec)
    ray: RaySpec = field(default_factory=RaySpec)

    @property
    def baseline(self) -> ArmSpec:
        return next(a for a in self.arms if a.role == "baseline")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


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


def validate(spec: Spec, source: str = "spec") -> Spec:
    """Cross-field checks, after flags were applied. Fills defaults that depend on others."""
    if len(spec.arms) < 2:
        raise SpecError(
            f"{source}: needs at least two arms (a baseline and a candidate), got {len(spec.arms)}",
            "give --baseline URL --candidate URL, or [[arms]] tables in the spec",
        )
    if len(spec.arms) > MAX_ARMS:
        raise SpecError(
            f"{source}: {len(spec.arms)} arms; abtui compares at most {MAX_ARMS}",
            "each arm gets its own load-generator process: split the comparison into several runs",
        )
    names = [a.name for a in spec.arms]
    if len(set(names)) != len(names):
        raise SpecError(f"{source}: arm names must be unique, got {names}")
    roles = [a.role for a in spec.arms]
    for a in spec.arms:
        if a.role not in ("baseline", "candidate"):
            raise SpecError(f"{source}: arm {a.name!r}: role must be 'baseline' or 'candidate', got {a.role!r}")
    if roles.count("baseline") == 0:
        spec.arms[0].role = "baseline"
    elif roles.count("baseline") > 1:
        raise SpecError(f"{source}: exactly one arm can be the baseline, got {roles.count('baseline')}")
    # the baseline first: arm index 0 is the baseline everywhere downstream
    spec.arms.sort(key=lambda a: a.role != "baseline")
    for a in spec.arms:
        a.url = a.url.rstrip("/")
        if not re.match(r"^https?://[^/\s]+", a.url):
            raise SpecError(
                f"{source}: arm {a.name!r}: url {a.url!r} is not an http(s) URL",
                "e.g. http://127.0.0.1:8000/v1",
            )
        if not a.url.endswith("/v1"):
            raise SpecError(
                f"{source}: arm {a.name!r}: url {a.url!r} does not end in /v1",
                f"OpenAI-compatible servers serve under /v1: try {a.url}/v1",
            )
        from abtui.client.tls import check_arm_tls

        check_arm_tls(a, f"{source}: arm {a.name!r}")
        a.api = a.api or spec.request.api
        if a.api not in APIS:
            raise SpecError(f"{source}: arm {a.name!r}: api must be one of {', '.join(APIS)}, got {a.api!r}")
    w, ld = spec.workload, spec.load
    if w.requests is None and w.file is None and ld.duration_s is None:
        w.requests = 200
    for key in ("requests", "input_tokens", "output_tokens"):
        if getattr(w, key) is not None and getattr(w, key) < 1:
            raise SpecError(f"{source}: workload.{key} must be ≥ 1, got {getattr(w, key)}")
    if ld.rate is not None and not (ld.rate > 0 and math.isfinite(ld.rate)):
        raise SpecError(f"{source}: load.rate must be a positive number of requests/s, got {ld.rate}")
    if ld.concurrency is not None and ld.concurrency < 1:
        raise SpecError(f"{source}: load.concurrency must be ≥ 1, got {ld.concurrency}")
    sweep = ld.sweep_rate or ld.sweep_concurrency
    if ld.rate is None and ld.concurrency is None and not (w.file or sweep or ld.arrival == "replay"):
        raise SpecError(
            f"{source}: set load.rate (open loop, requests/s) or load.concurrency (closed loop)",
            "e.g. --rate 20 or --concurrency 8",
        )
    if ld.arrival not in ARRIVALS:
        raise SpecError(f"{source}: load.arrival must be one of {', '.join(ARRIVALS)}, got {ld.arrival!r}")
    from abtui.workload.spec_check import check_workload

    check_workload(spec, source)
    if ld.warmup < 0:
        raise SpecError(f"{source}: load.warmup must be ≥ 0, got {ld.warmup}")
    if spec.request.http not in HTTP_CLIENTS:
        raise SpecError(f"{source}: request.http must be one of {', '.join(HTTP_CLIENTS)}")
    if spec.request.api not in APIS:
        raise SpecError(f"{source}: request.api must be one of {', '.join(APIS)}")
    _validate_cost_policy(spec, source)
    _validate_ablation(spec, source)
    validate_quality(spec.quality, source, spec.load)
    from abtui.telemetry.arm_check import check_telemetry

    check_telemetry(spec, source)
    if spec.ray.placement not in ("spread", "pack"):
        raise SpecError(f"{source}: ray.placement must be 'spread' or 'pack', got {spec.ray.placement!r}")
    if not spec.ray.cpus_per_generator > 0:
        raise SpecError(f"{source}: ray.cpus_per_generator must be > 0, got {spec.ray.cpus_per_generator}")
    if spec.name is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", spec.name):
        raise SpecError(
            f"{source}: name {spec.name!r} must be letters, digits, '.', '_' or '-'",
            "it becomes the session file's name",
        )
    return spec


def _validate_ablation(spec: Spec, source: str) -> None:
    factors = spec.ablation.factors
    if not factors:
        return
    from abtui.stats.factorial import (
        BASE_NAME,
        MAX_FACTORS,
        MIN_FACTORS,
        SEP,
        combo_name,
        design_of,
    )

    hint = (f"[ablation] factors = [\"fp8\", \"spec\"] needs arms named {BASE_NAME} (the "
            f"baseline), fp8, spec and fp8{SEP}spec")
    if not MIN_FACTORS <= len(factors) <= MAX_FACTORS:
        raise SpecError(f"{source}: ablation.factors: {len(factors)} factors; a factorial takes "
                        f"2 or 3 (2^k arms: 4 or 8; beyond 3 the arm count is impractical)", hint)
    for f in factors:
        if not f or SEP in f or f == BASE_NAME or len(set(factors)) != len(factors):
            raise SpecError(f"{source}: ablation.factors: {f!r} must be a unique name without "
                            f"{SEP!r}, not {BASE_NAME!r}", hint)
    design, why = design_of([a.name for a in spec.arms], factors)
    if design is None:
        want = [combo_name(factors, tuple((i >> j) & 1 for j in range(len(factors))))
                for i in range(2 ** len(factors))]
        raise SpecError(f"{source}: ablation: {why}", f"the arms must be {', '.join(want)} "
                        f"(the baseline first: every factor off)")


def _validate_cost_policy(spec: Spec, source: str) -> None:
    from abtui.stats.decide import METRIC_KEYS

    prices = [spec.cost.gpu_price] + [a.gpu_price for a in spec.arms]
    for p in prices:
        if p is not None and not (p >= 0 and math.isfinite(p)):
            raise SpecError(f"{source}: gpu_price must be a non-negative USD/GPU-hour, got {p}")
    for g in [spec.cost.gpus] + [a.gpus for a in spec.arms]:
        if g is not None and g < 1:
            raise SpecError(f"{source}: gpus must be ≥ 1, got {g}")
    if spec.cost.gpu_price is None and any(a.gpu_price is not None for a in spec.arms):
        missing = [a.name for a in spec.arms if a.gpu_price is None]
        if missing:
            raise SpecError(
                f"{source}: gpu_price is set on some arms but not on {', '.join(missing)}",
                "set [cost] gpu_price for every arm, or gpu_price on each [[arms]] table",
            )
    pol = spec.policy
    hint = "known: " + ", ".join(METRIC_KEYS)
    if pol.primary not in METRIC_KEYS:
        raise SpecError(f"{source}: policy.primary: unknown metric {pol.primary!r}", hint)
    for g in pol.guardrails:
        if g not in METRIC_KEYS:
            raise SpecError(f"{source}: policy.guardrails: unknown metric {g!r}", hint)
    if not 0 < pol.alpha < 1:
        raise SpecError(f"{source}: policy.alpha must be between 0 and 1, got {pol.alpha}")
    for key in ("delta", "delta_tail"):
        v = getattr(pol, key)
        if not (0 <= v < 1):
            raise SpecError(f"{source}: policy.{key} must be a fraction in [0, 1), got {v}")
    if pol.resamples < 100:
        raise SpecError(f"{source}: policy.resamples must be ≥ 100, got {pol.resamples}")
