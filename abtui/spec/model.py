"""The experiment spec's typed model: one dataclass per TOML section, every field commented
(:mod:`abtui.spec` has an example file)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from abtui.quality.config import QualitySpec
from abtui.stats.bootstrap import DEFAULT_RESAMPLES
from abtui.stats.decide import DEFAULT_ALPHA, DELTA_CENTRAL, DELTA_TAIL

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
    """Skip (and count) malformed lines of ``file`` or ``conversations`` instead of stopping at the
    first one."""
    conversations: str | None = None
    """A conversation file (``abtui workload conversations`` writes one): each conversation
    starts at its arrival and sends its turns one after another, turn k when turn k − 1's answer
    completed on the same arm plus its think time (docs/guide.md, Conversations). Instead of
    ``file``; ``requests`` then takes the first whole conversations of at most that many turns."""
    history: str = "recorded"
    """The earlier answers a conversation's turn carries: ``recorded`` (the file's: both arms
    send the same prompts) or ``own`` (the arm's own answers: the arms' prompts diverge)."""
    input_dist: str | None = None
    """Prompt lengths: ``fixed:N``, ``uniform:LO:HI``, ``normal:MEAN:SD``, ``lognormal:MEDIAN:SIGMA``
    or ``trace:FILE`` (sampled from a workload file); default ``fixed:<input_tokens>``."""
    output_dist: str | None = None
    """``max_tokens`` distribution, same grammar; default ``fixed:<output_tokens>``."""
    prefix_groups: int = 0
    """Shared-prefix groups: item i starts with group (i mod N)'s prefix (0: no sharing)."""
    prefix_tokens: int = 0
    """Length of each group's shared prefix, in tokens (part of the prompt length)."""
    task: str | None = None
    """Prompts a real instruct model answers instead of common words (abtui.workload.tasks):
    ``repeat`` (copy a paragraph of ``input_tokens`` words: input-grounded) or ``story`` (write
    a short story: open generation). Use with ``request.api = "chat"`` for chat models."""
    images_per_request: int = 0
    """Images made locally and sent with each synthetic prompt (chat content parts with PNG
    data URLs, :mod:`abtui.client.images`); needs ``request.api = "chat"``."""
    image_size: str = "512x512"
    """Their pixel size, ``WIDTHxHEIGHT``, or several separated by commas, each image drawing
    one of them (seeded): ``"256x256,512x512,1024x768"``."""


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
    until_decided: bool = False
    """Stop as soon as the anytime-valid verdict is decided (GO, NO-GO, or no gain possible on
    the primary); ``requests`` / ``duration`` are then the budget (docs/verdict.md §11)."""


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
    session_header: str = "X-Session-ID"
    """A conversation's turns carry this header with the conversation's id, so that a
    multi-replica arm's router sends them to one replica (``""``: no header)."""


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
    alpha: float = DEFAULT_ALPHA
    """Significance level (Holm over primary + guardrails, Benjamini–Hochberg over the rest)."""
    delta: float = DELTA_CENTRAL
    """Noise threshold δ for means, medians, throughput, goodput and cost (0.02 = 2%)."""
    delta_tail: float = DELTA_TAIL
    """Noise threshold δ for P90 / P95 / P99."""
    resamples: int = DEFAULT_RESAMPLES
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
class ProfileSpec:
    enabled: bool = False
    """Ask each arm's server to profile a window of the measured phase (``--profile``; a
    ``[profile]`` table turns it on unless it says ``enabled = false``): ``POST /start_profile``
    and ``/stop_profile`` as vLLM, SGLang and ``abtui sim serve`` serve them (docs/profile.md)."""
    after_s: float = 1.0
    """The window opens this long after the measured phase starts (warm-up done)."""
    duration_s: float = 5.0
    """The window's length (it closes earlier if the load ends first)."""
    steps: int | None = None
    """At most this many engine steps recorded: sent in ``/start_profile``'s body
    (``num_steps``, ``max_iterations``) to servers that take it."""
    optimises: list = field(default_factory=list)
    """The classes the candidate's optimisation targets (``gemm``, ``attention``, …): the
    Amdahl bound on what it can gain, per phase."""
    factor: float = 2.0
    """The bound also for the targeted classes this many times faster."""
    dir: str | None = None
    """The folder the servers write traces to, when they share this machine's filesystem:
    ``DIR/<arm>`` (else ``DIR``), the trace files new since the window opened."""
    traces: dict = field(default_factory=dict)
    """Per arm, where its trace appears on this machine (a file or a folder): for a server
    that does not share the filesystem (``--profile-trace ARM=PATH``)."""
    wait_s: float = 30.0
    """How long to wait after ``/stop_profile`` for an arm's trace file to appear."""
    classes: dict = field(default_factory=dict)
    """``[profile.classes]``: class → name patterns, checked before the built-in table."""


@dataclass
class Spec:
    name: str | None = None
    """Session name; the file is ``<store.dir>/<name>.duckdb``. Default: a timestamp."""
    arms: list[ArmSpec] = field(default_factory=list)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    slo: dict[str, float] = field(default_factory=dict)
    """Per-request SLOs in seconds: ttft, ttft_user, ttfo, tpot, tpot_reasoning, tpot_answer,
    itl (largest gap), e2e."""
    request: RequestSpec = field(default_factory=RequestSpec)
    store: StoreSpec = field(default_factory=StoreSpec)
    cost: CostSpec = field(default_factory=CostSpec)
    policy: PolicySpec = field(default_factory=PolicySpec)
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    quality: QualitySpec = field(default_factory=QualitySpec)
    ablation: AblationSpec = field(default_factory=AblationSpec)
    ray: RaySpec = field(default_factory=RaySpec)
    profile: ProfileSpec = field(default_factory=ProfileSpec)

    @property
    def baseline(self) -> ArmSpec:
        return next(a for a in self.arms if a.role == "baseline")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
