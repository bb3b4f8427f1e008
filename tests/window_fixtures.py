"""Session files written through the store whose GPU reads one thing while an arm's measured
requests run and something else around them (warm-up, a quality phase, idle, the other arm's
turns): what the measured-window tests of the diagnosis and the replay are built on."""

from __future__ import annotations

from abtui.client.records import RequestRecord
from abtui.store.writer import SessionWriter

S = 1_000_000_000
TOKENS = 100  # output tokens of each measured request
IDLE_W = 60.0  # what the GPU reads outside the measured windows


def _requests(arm: int, start_s: float, n: int, block: int = 0, item0: int = 0) -> list:
    """``n`` measured requests dispatched one a second from ``start_s``, each done 1.5 s later
    (the window: ``[start_s, start_s + n - 1 + 1.5]``)."""
    return [
        RequestRecord(
            arm=arm,
            item=item0 + k,
            block=block,
            scheduled_ns=int((start_s + k) * S),
            dispatched_ns=int((start_s + k) * S),
            done_ns=int((start_s + k + 1.5) * S),
            chunk_ns=[int((start_s + k + 0.1) * S), int((start_s + k + 1.5) * S)],
            chunk_tokens=[1, TOKENS - 1],
            n_output=TOKENS,
            n_input=10,
        )
        for k in range(n)
    ]


def _gpu_rows(arm: int, t_s: int, watts: float, busy: bool) -> list[tuple]:
    t = t_s * S
    return [
        (arm, "nvml", t, "gpu.power_w", watts),
        (arm, "nvml", t, "gpu.energy_j.delta", watts * 1.0),  # 1 s between samples
        (arm, "nvml", t, "gpu.dram_active", 0.8 if busy else 0.02),
        (arm, "nvml", t, "gpu.sm_active", 0.7 if busy else 0.0),
        (arm, "vllm", t, "kv_usage", 0.5 if busy else 0.0),
        (arm, "vllm", t, "running", 8.0 if busy else 0.0),
        (arm, "scrape", t, "scrape.ok", 1.0),
    ]


def quality_phase_session(path, interval_s: float | None = 1.0):
    """One arm. t0 = 0; warm-up requests at 5–7 s; 10 measured requests dispatched at 10..19 s,
    the last done at 20.5 s; a quality phase and idle after. One sample a second, 0..40 s: 400 W
    (and busy DRAM, SM, KV, running) at 10..21 s — the window plus one interval's slack — and
    60 W idle everywhere else. In the window: 12 samples, 4800 J over 1000 tokens = 4.8 J/token;
    over all 41 samples (the old rule): 6540 J, 6.54 J/token, 159.5 W."""
    with SessionWriter(path) as w:
        tel = {} if interval_s is None else {"telemetry": {"interval_s": interval_s}}
        w.write_meta(session_name="quality-phase", **tel)
        w.write_arms([{"arm": 0, "name": "a", "role": "baseline", "url": "http://127.0.0.1:1/v1"}])
        w.event("start", "t0=0")
        warm = _requests(0, 5.0, 2, item0=100)
        for r in warm:
            r.warmup = True
        w.add_records(warm + _requests(0, 10.0, 10))
        w.add_telemetry(
            row
            for t in range(41)
            for row in _gpu_rows(0, t, 400.0 if 10 <= t <= 21 else IDLE_W, 10 <= t <= 21)
        )
    return path


# alternate schedule, arms sharing one GPU: block 0 plays A then B, block 1 B then A
ALT_TURNS = {0: [(0, 10.0), (1, 52.0)], 1: [(0, 24.0), (1, 38.0)]}  # arm -> [(block, start_s)]
ALT_WATTS = {0: 400.0, 1: 250.0}


def alternating_session(path):
    """Two arms taking turns on one GPU (``alternate``): A plays [10, 20.5] and [52, 62.5] s,
    B [24, 34.5] and [38, 48.5] s, 10 requests a turn. Both arms sample the shared GPU every
    second, 0..70 s: it reads 400 W in A's turns (+1 s), 250 W in B's, 60 W between them and
    after. Each arm's own windows: A 400 W, 9600 J / 2000 tokens = 4.8 J/token; B 250 W,
    3.0 J/token."""

    def watts(t: int) -> tuple[float, bool]:
        for arm, turns in ALT_TURNS.items():
            for _, start in turns:
                if start <= t <= start + 11:
                    return ALT_WATTS[arm], True
        return IDLE_W, False

    with SessionWriter(path) as w:
        w.write_meta(session_name="alternate", telemetry={"interval_s": 1.0})
        w.write_arms(
            [
                {"arm": i, "name": n, "role": None, "url": "http://127.0.0.1:1/v1"}
                for i, n in enumerate(("a", "b"))
            ]
        )
        w.event("start", "t0=0")
        for arm, turns in ALT_TURNS.items():
            for block, start in turns:
                w.add_records(_requests(arm, start, 10, block=block, item0=10 * block))
        w.add_telemetry(
            row for t in range(71) for arm in (0, 1) for row in _gpu_rows(arm, t, *watts(t))
        )
    return path
