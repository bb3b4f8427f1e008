"""The NVML path through a fake ``pynvml`` at the import boundary (there is no GPU here)."""

import sys
import time
import types

import pytest

from abtui.telemetry.nvml import Nvml
from abtui.telemetry.sampler import ArmTelemetry, TelemetryHub, parse_gpu_index


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(
    count=2,
    *,
    init_error=None,
    unsupported=(),
    gpm=True,
    energy_mj=(1_000_000, 1_000_000),
    reasons=0,
):
    """A module with pynvml's names; ``unsupported`` lists functions that raise NOT_SUPPORTED."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = NVMLError
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0
    nv.NVML_GPM_METRICS_GET_VERSION = 1
    nv.calls = {}
    nv.energy = list(energy_mj)
    nv.fail = {}  # function name -> error code raised from now on
    nv.shutdown = False

    def fn(name, result):
        def f(*args):
            nv.calls[name] = nv.calls.get(name, 0) + 1
            if name in unsupported:
                raise NVMLError(3)
            if name in nv.fail:
                raise NVMLError(nv.fail[name])
            return result(*args) if callable(result) else result

        setattr(nv, name, f)

    def init():
        if init_error is not None:
            raise NVMLError(init_error)

    fn("nvmlInit", lambda: init())
    fn("nvmlShutdown", lambda: setattr(nv, "shutdown", True))
    fn("nvmlDeviceGetCount", count)
    fn("nvmlDeviceGetHandleByIndex", lambda i: ("h", i))
    fn("nvmlDeviceGetName", lambda h: b"NVIDIA H100 80GB HBM3")
    fn(
        "nvmlDeviceGetMemoryInfo",
        lambda h: types.SimpleNamespace(total=80 * 2**30, used=(70 + h[1]) * 2**30, free=0),
    )
    fn("nvmlDeviceGetUtilizationRates", lambda h: types.SimpleNamespace(gpu=100, memory=40))
    fn("nvmlDeviceGetPowerUsage", lambda h: 500_000 + 100_000 * h[1])  # mW

    def energy(h):
        nv.energy[h[1]] += 350_000  # 350 J per sample
        return nv.energy[h[1]]

    fn("nvmlDeviceGetTotalEnergyConsumption", energy)
    fn("nvmlDeviceGetClockInfo", lambda h, which: 1980 if which == 1 else 2619)
    fn("nvmlDeviceGetTemperature", lambda h, which: 60 + 10 * h[1])
    fn("nvmlDeviceGetCurrentClocksEventReasons", lambda h: reasons)
    fn("nvmlGpmQueryDeviceSupport", types.SimpleNamespace(isSupportedDevice=int(gpm)))
    fn("nvmlGpmSampleAlloc", lambda: object())
    fn("nvmlGpmSampleGet", lambda h, s: s)
    fn("nvmlGpmSampleFree", None)

    class MetricsGet:
        def __init__(self):
            self.metrics = [
                types.SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)
            ]

    nv.c_nvmlGpmMetricsGet_t = MetricsGet
    values = {2: 85.0, 5: 30.0, 10: 71.0}

    def metrics_get(mg):
        assert mg.sample1 is not mg.sample2
        for m in mg.metrics[: mg.numMetrics]:
            m.value = values[m.metricId]
        return mg

    fn("nvmlGpmMetricsGet", metrics_get)
    return nv


@pytest.fixture
def install(monkeypatch):
    def put(module):
        if module is None:
            monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
        else:
            monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return put


def test_missing_library_is_one_clear_line(install):
    install(None)
    nv = Nvml()
    assert nv.start() is False
    assert nv.status == "no GPU telemetry: pynvml (nvidia-ml-py) is not installed"
    assert nv.sample(0) == {}


def test_no_driver_is_one_clear_line(install):
    install(fake_pynvml(init_error=9))
    nv = Nvml()
    assert not nv.start()
    assert nv.status.startswith("no GPU telemetry: NVML did not start")
    hub = TelemetryHub([ArmTelemetry(0, "a", None, [0])], 0.05)
    assert hub.start() == [("telemetry", nv.status, None)]
    assert hub.sources == []
    hub.stop()


def test_fields_units_and_gpm_on_the_second_sample(install):
    install(fake_pynvml())
    nv = Nvml()
    assert nv.start() and nv.count == 2
    first = nv.sample(1)
    assert first["gpu.mem_used_bytes"] == 71 * 2**30
    assert first["gpu.busy"] == 1.0 and first["gpu.mem_busy"] == 0.4
    assert first["gpu.power_w"] == 600.0 and first["gpu.temp_c"] == 70
    assert first["gpu.sm_clock_mhz"] == 1980 and first["gpu.mem_clock_mhz"] == 2619
    assert first["gpu.throttled"] == 0.0
    assert "gpu.dram_active" not in first  # GPM needs two samples
    second = nv.sample(1)
    assert second["gpu.dram_active"] == pytest.approx(0.71)
    assert second["gpu.sm_active"] == pytest.approx(0.85)
    assert second["gpu.tensor_active"] == pytest.approx(0.30)
    assert nv.names[1] == "NVIDIA H100 80GB HBM3"


def test_unsupported_fields_are_na_and_asked_once(install):
    fake = install(
        fake_pynvml(
            unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"},
            gpm=False,
        )
    )
    nv = Nvml()
    nv.start()
    for _ in range(3):
        s = nv.sample(0)
    assert "gpu.power_w" not in s and "gpu.energy_j" not in s and "gpu.dram_active" not in s
    assert s["gpu.temp_c"] == 60  # the rest is still there
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlGpmQueryDeviceSupport"] == 1


def test_old_driver_without_clock_event_reasons_uses_throttle_reasons(install):
    fake = fake_pynvml(reasons=0)
    del fake.nvmlDeviceGetCurrentClocksEventReasons
    fake.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x40 | 0x1  # HW thermal + idle
    install(fake)
    nv = Nvml()
    nv.start()
    s = nv.sample(0)
    assert s["gpu.throttled"] == 1.0 and s["gpu.throttle_reasons"] == 0x41


def test_driver_errors_mid_run(install):
    fake = install(fake_pynvml())
    nv = Nvml()
    nv.start()
    assert "gpu.power_w" in nv.sample(0)
    fake.fail["nvmlDeviceGetPowerUsage"] = 999  # a transient unknown error on one field
    s = nv.sample(0)
    assert "gpu.power_w" not in s and "gpu.temp_c" in s and not nv.lost
    del fake.fail["nvmlDeviceGetPowerUsage"]
    assert "gpu.power_w" in nv.sample(0)  # not remembered as unsupported
    fake.fail["nvmlDeviceGetMemoryInfo"] = 15  # GPU is lost
    nv.sample(0)
    assert nv.lost and nv.status.startswith("GPU telemetry stopped")
    assert nv.sample(0) == {}


def test_bad_index_is_a_message(install):
    install(fake_pynvml(count=1))
    hub = TelemetryHub([ArmTelemetry(0, "a", None, [0]), ArmTelemetry(1, "b", None, [3])], 0.05)
    msgs = hub.start()
    hub.stop()
    assert msgs == [
        ("telemetry", "no GPU telemetry: GPU index 3 does not exist (this machine has 1 GPU)", None)
    ]


def test_hub_samples_arms_in_the_background(install):
    fake = install(fake_pynvml())
    arms = [ArmTelemetry(0, "bf16", None, [0]), ArmTelemetry(1, "fp8-tp2", None, [0, 1])]
    hub = TelemetryHub(arms, interval_s=0.02)
    msgs = hub.start()
    assert msgs and "NVML sampling GPU 0 (NVIDIA H100 80GB HBM3), 1" in msgs[0][1]
    assert "GPU 0 serves bf16, fp8-tp2: its power, energy and activity are theirs" in msgs[1][1]
    deadline = time.monotonic() + 10
    rows = []
    while time.monotonic() < deadline:
        time.sleep(0.05)
        got, _ = hub.drain()
        rows += got
        if sum(1 for r in rows if r[0] == 1 and r[3] == "gpu.energy_j.delta") >= 3:
            break
    hub.stop()
    assert fake.shutdown
    assert {r[1] for r in rows} == {"nvml"}
    by = {}
    for arm, _, _, metric, value in rows:
        by.setdefault((arm, metric), []).append(value)
    assert by[(0, "gpu.power_w")][0] == 500.0
    assert by[(1, "gpu.power_w")][0] == 1100.0  # TP=2: the two GPUs' power adds up
    assert by[(1, "gpu.temp_c")][0] == 70  # the hottest
    assert by[(1, "gpu.busy")][0] == 1.0  # averaged
    # energy: 350 J per read per GPU; an arm on two GPUs gets 700 J per interval (GPU 0 is read
    # once per poll even though two arms use it)
    assert set(by[(1, "gpu.energy_j.delta")]) == {700.0}
    assert set(by[(0, "gpu.energy_j.delta")]) == {350.0}
    assert hub.cpu_s >= 0 and hub.polls >= 3


def test_gpu_index_parsing():
    assert parse_gpu_index(None, "x") == [] and parse_gpu_index(2, "x") == [2]
    assert parse_gpu_index("0,1", "x") == [0, 1]
    for bad in ("a", "-1", True, 1.5):
        with pytest.raises(ValueError, match="x must be a GPU index"):
            parse_gpu_index(bad, "x")


def test_gpu_check_script_prints_every_field_or_na(install):
    import importlib.util
    import io
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    install(fake_pynvml(unsupported={"nvmlDeviceGetPowerUsage"}, reasons=0x4))
    out = io.StringIO()
    assert mod.report(None, out, pause_s=0) == 0
    text = out.getvalue()
    assert "GPU 1: NVIDIA H100 80GB HBM3" in text
    assert "DRAM bandwidth used / peak (GPM)             71.0 %" in text
    assert "power                                        n/a" in text
    assert "clock event reasons (bitmask)                0x4" in text
    out = io.StringIO()
    assert mod.report([5], out) == 2 and "GPU index 5 does not exist" in out.getvalue()
    install(None)
    out = io.StringIO()
    assert mod.report(None, out) == 0
    assert "no GPU telemetry: pynvml (nvidia-ml-py) is not installed" in out.getvalue()
