"""Local GPUs through NVML (``pynvml`` from nvidia-ml-py): every field optional, nothing fatal.

:class:`Nvml` initialises NVML lazily, on the first :meth:`Nvml.start`. No ``pynvml``, no
driver, no GPU: :attr:`Nvml.status` says so in one line and every sample is empty — a normal
state, not an error. Each field of :meth:`Nvml.sample` is read on its own: a field the GPU does
not support (``NVML_ERROR_NOT_SUPPORTED``, a function the driver lacks) is remembered and never
asked again, and is absent from the sample (shown as n/a, never as 0). A driver error on one
field loses that field for that sample; a lost GPU or an uninitialised library stops sampling
with a message.

Fields, in the same vocabulary as the DCGM exporter's (:mod:`abtui.telemetry.engines`):

- ``gpu.mem_used_bytes``, ``gpu.mem_total_bytes``;
- ``gpu.busy`` and ``gpu.mem_busy`` (``nvmlDeviceGetUtilizationRates`` ``.gpu`` / ``.memory``,
  as fractions): the share of *time* a kernel ran / device memory was read or written during
  the driver's sample period — not SM occupancy and not bandwidth;
- ``gpu.power_w`` (the driver's power reading), ``gpu.energy_j`` (total energy since the driver
  loaded, a counter: the sampler turns it into per-interval deltas for J/token);
- ``gpu.sm_clock_mhz``, ``gpu.mem_clock_mhz``, ``gpu.temp_c``;
- ``gpu.throttle_reasons`` (the raw bitmask) and ``gpu.throttled`` (1 when a power, thermal or
  slowdown reason is set: :data:`~abtui.telemetry.engines.THROTTLE_MASK`);
- on GPUs with GPM (Hopper and newer), between two samples: ``gpu.dram_active`` (DRAM bandwidth
  used / peak, 0..1 — the one bandwidth figure here), ``gpu.sm_active`` (SM utilisation) and
  ``gpu.tensor_active`` (any tensor pipe active), all fractions.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from abtui.telemetry.engines import throttled

NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND
UNINITIALIZED = 1
GPU_IS_LOST = 15
_FATAL = {UNINITIALIZED, GPU_IS_LOST}
# GPM metric ids (nvml.h): SM_UTIL 2, ANY_TENSOR_UTIL 5, DRAM_BW_UTIL 10; values are percentages
GPM_METRICS = {"gpu.sm_active": 2, "gpu.tensor_active": 5, "gpu.dram_active": 10}


def _err_value(e: BaseException) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


class Nvml:
    """A lazy NVML session over GPUs by index (see the module docstring)."""

    def __init__(self) -> None:
        self.nv: ModuleType | Any = None
        self.status: str | None = None  # why there is no GPU telemetry; None when it works
        self.count = 0
        self.names: dict[int, str] = {}
        self.unsupported: set[tuple[int, str]] = set()
        self._handles: dict[int, Any] = {}
        self._gpm_prev: dict[int, Any] = {}
        self._started = False
        self.lost = False

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> bool:
        """Initialise NVML once; True when GPUs can be sampled, else :attr:`status` says why."""
        if self._started:
            return self.status is None
        self._started = True
        try:
            nv = importlib.import_module("pynvml")
        except ImportError:
            self.status = "no GPU telemetry: pynvml (nvidia-ml-py) is not installed"
            return False
        try:
            nv.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            self.status = f"no GPU telemetry: NVML did not start ({_describe(e)})"
            return False
        self.nv = nv
        try:
            self.count = int(nv.nvmlDeviceGetCount())
        except Exception as e:
            self.status = f"no GPU telemetry: NVML lists no GPU ({_describe(e)})"
            return False
        if self.count == 0:
            self.status = "no GPU telemetry: NVML sees no GPU on this machine"
        return self.status is None

    def check_indices(self, indices: list[int]) -> str | None:
        """A message when one of ``indices`` is not a GPU here; None when all are."""
        bad = [i for i in indices if not 0 <= i < self.count]
        if bad:
            return (
                f"GPU index {', '.join(map(str, bad))} does not exist "
                f"(this machine has {self.count} GPU{'s' if self.count != 1 else ''})"
            )
        return None

    def close(self) -> None:
        if self.nv is not None:
            for h in self._gpm_prev.values():
                self._safe(lambda h=h: self.nv.nvmlGpmSampleFree(h))
            self._gpm_prev.clear()
            self._safe(self.nv.nvmlShutdown)
            self.nv = None

    # -- sampling -----------------------------------------------------------------------------

    def handle(self, index: int) -> Any:
        h = self._handles.get(index)
        if h is None:
            h = self._handles[index] = self.nv.nvmlDeviceGetHandleByIndex(index)
            name = self._field(index, "name", lambda: self.nv.nvmlDeviceGetName(h))
            if name is not None:
                self.names[index] = name.decode() if isinstance(name, bytes) else str(name)
        return h

    def sample(self, index: int) -> dict[str, float]:
        """The fields of GPU ``index`` that could be read now (absent: n/a)."""
        if self.nv is None or self.lost:
            return {}
        nv = self.nv
        try:
            h = self.handle(index)
        except Exception as e:
            self._fatal_or_none(e)
            return {}
        out: dict[str, float] = {}

        def put(key: str, fn, scale: float = 1.0) -> None:
            v = self._field(index, key, fn)
            if v is not None:
                out[key] = float(v) * scale

        mem = self._field(index, "memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            out["gpu.mem_used_bytes"] = float(mem.used)
            out["gpu.mem_total_bytes"] = float(mem.total)
        util = self._field(index, "utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            out["gpu.busy"] = util.gpu / 100.0
            out["gpu.mem_busy"] = util.memory / 100.0
        put("gpu.power_w", lambda: nv.nvmlDeviceGetPowerUsage(h), 1e-3)
        put("gpu.energy_j", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), 1e-3)
        put("gpu.sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        put("gpu.mem_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))
        put("gpu.temp_c", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        reasons = self._field(index, "throttle", lambda: _throttle_reasons(nv, h))
        if reasons is not None:
            out["gpu.throttle_reasons"] = float(reasons)
            out["gpu.throttled"] = throttled(reasons)
        out.update(self._gpm(index, h))
        return out

    def _gpm(self, index: int, h: Any) -> dict[str, float]:
        """GPM metrics between the previous sample and this one (Hopper+); {} otherwise."""
        nv = self.nv
        if (index, "gpm") in self.unsupported:
            return {}
        if index not in self._gpm_prev:
            sup = self._field(index, "gpm", lambda: nv.nvmlGpmQueryDeviceSupport(h))
            if sup is None or not getattr(sup, "isSupportedDevice", 0):
                self.unsupported.add((index, "gpm"))
                return {}
        cur = self._field(index, "gpm", lambda: nv.nvmlGpmSampleGet(h, nv.nvmlGpmSampleAlloc()))
        if cur is None:
            return {}
        prev = self._gpm_prev.get(index)
        self._gpm_prev[index] = cur
        if prev is None:
            return {}
        out: dict[str, float] = {}
        try:
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(GPM_METRICS)
            mg.sample1, mg.sample2 = prev, cur
            for i, mid in enumerate(GPM_METRICS.values()):
                mg.metrics[i].metricId = mid
            nv.nvmlGpmMetricsGet(mg)
            for i, key in enumerate(GPM_METRICS):
                m = mg.metrics[i]
                if m.nvmlReturn == 0:
                    out[key] = float(m.value) / 100.0
        except Exception as e:
            if _err_value(e) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                self.unsupported.add((index, "gpm"))
            else:
                self._fatal_or_none(e)
        finally:
            self._safe(lambda: nv.nvmlGpmSampleFree(prev))
        return out

    def _field(self, index: int, key: str, fn) -> Any:
        """``fn()``, or None when unsupported (remembered) or failing now."""
        if (index, key) in self.unsupported:
            return None
        try:
            return fn()
        except Exception as e:
            code = _err_value(e)
            if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND) or isinstance(e, AttributeError):
                self.unsupported.add((index, key))
            else:
                self._fatal_or_none(e)
            return None

    def _fatal_or_none(self, e: BaseException) -> None:
        if _err_value(e) in _FATAL:
            self.lost = True
            self.status = f"GPU telemetry stopped: {_describe(e)}"

    def _safe(self, fn) -> None:
        try:
            fn()
        except Exception:
            pass


def _throttle_reasons(nv: Any, h: Any) -> int:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is None:
        fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(h))


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) < 120 else text[:117] + "..."
