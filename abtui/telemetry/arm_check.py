"""Validation of the spec's telemetry and roofline fields (called by :func:`abtui.spec.validate`).

Each bad value is a :class:`~abtui.errors.SpecError` naming the source, the arm and the field.
"""

from __future__ import annotations

from abtui.errors import AbtuiError, SpecError
from abtui.telemetry.sampler import parse_gpu_index

DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")


def check_telemetry(spec, source: str) -> None:
    for a in spec.arms:
        where = f"{source}: arm {a.name!r}"
        try:
            parse_gpu_index(a.gpu_index, f"{where}: gpu_index")
        except ValueError as e:
            raise SpecError(str(e), "NVML numbers the GPUs from 0, as nvidia-smi shows") from None
        if a.metrics_url is not None and a.metrics_url.strip().lower() not in ("off", "none", ""):
            if not a.metrics_url.startswith(("http://", "https://")):
                raise SpecError(
                    f"{where}: metrics_url {a.metrics_url!r} is not an http(s) URL",
                    'e.g. http://127.0.0.1:8000/metrics, or "off"',
                )
        for key in ("dtype", "kv_dtype"):
            v = getattr(a, key)
            if v is not None and v not in DTYPES:
                raise SpecError(f"{where}: {key} must be one of {', '.join(DTYPES)}, got {v!r}")
        if a.model_preset and a.model_config:
            raise SpecError(f"{where}: give model_preset or model_config, not both")
        try:
            if a.gpu:
                from abtui.hardware.gpus import get_gpu

                get_gpu(a.gpu)
            if a.model_preset:
                from abtui.hardware.models import get_model

                get_model(a.model_preset)
        except AbtuiError as e:
            raise SpecError(f"{where}: {e.message}", e.hint) from None
