"""The experiment spec: arms, workload, load, SLOs, request settings, storage.

One typed model (:mod:`abtui.spec.model`), loaded from TOML (``abtui run spec.toml``,
:mod:`abtui.spec.parse`) and/or command-line flags (flags override the file), then checked
(:mod:`abtui.spec.checks`). Every field has a comment; messages name the file and the field.

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

from abtui.spec.checks import validate
from abtui.spec.model import (
    APIS,
    ARRIVALS,
    DEFAULT_GUARDRAILS,
    HTTP_CLIENTS,
    MAX_ARMS,
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
)
from abtui.spec.parse import load_spec, parse_duration, parse_slo_string, spec_from_dict

__all__ = [
    "APIS",
    "ARRIVALS",
    "DEFAULT_GUARDRAILS",
    "HTTP_CLIENTS",
    "MAX_ARMS",
    "AblationSpec",
    "ArmSpec",
    "CostSpec",
    "LoadSpec",
    "PolicySpec",
    "RaySpec",
    "RequestSpec",
    "Spec",
    "StoreSpec",
    "TelemetrySpec",
    "WorkloadSpec",
    "load_spec",
    "parse_duration",
    "parse_slo_string",
    "spec_from_dict",
    "validate",
]
