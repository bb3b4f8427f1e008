"""Load-generator health: did every arm get the schedule it was promised?

From the stored raw facts (``dispatched_ns − scheduled_ns`` of every measured request) and the
generators' own counters: schedule lag P50 / P99 / max, the generator's CPU share of the
measuring wall time, and the most requests it had in flight. A session whose lag exceeds the
bounds of the verdict's generator rule (:func:`abtui.stats.lagguard.load_kept`: lag P99 over half
the mean inter-arrival gap *and* over δ of the median E2E — the arm did not get the offered load)
is marked ``degraded`` in ``meta`` (and an event), and the summary says so loudly. A lag past the
fixed limits (:data:`~abtui.metrics.summary.LAG_P99_LIMIT_S`, ``LAG_MAX_LIMIT_S``) that kept the
load is a note: the verdict then judges, row by row, whether the lag could explain the call.
With either, the note says what the machine was doing (:mod:`abtui.runner.machine`).

Also how far the main process fell behind reading the generators' records (:class:`Delivery`):
a main process that stalls (slow disk, SIGSTOP, a long checkpoint) does not slow the
generators — they keep their schedule and their finished records wait in their memory until it
reads again (docs/reliability.md) — but the session says it happened and how big the backlog
grew.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace

from abtui.metrics.summary import LAG_MAX_LIMIT_S, LAG_P99_LIMIT_S
from abtui.runner.machine import MachineUse, machine_words
from abtui.runner.messages import GeneratorStats
from abtui.stats.decide import DELTA_CENTRAL
from abtui.stats.lagguard import LOAD_GAP_FRACTION, load_kept, load_words
from abtui.stats.reasons import Code, Reason, codes

CPU_SHARE_WARN = 0.9  # a generator busier than this cannot keep up for long
BEHIND_NOTE_S = 1.0  # the main process read records later than this: a note in the summary
RECENT_S = 3.0  # the live header's backlog: the worst batch read in this window (Delivery.current)


class Delivery:
    """Per generator process, from the ``Batch`` messages the main process reads: the most
    seconds a batch waited between being shipped and being read (``behind_max_s``), and the
    most records that were waiting at once (``waiting_max``: shipped but not yet read, counted
    at each batch's ship time from the main process's own history of reads).

    Batches of one process arrive in the order they were shipped, so the history kept is only
    the reads since the oldest batch still possibly in transit: bounded by the backlog itself.
    Clocks: ``perf_counter_ns`` (CLOCK_MONOTONIC, one clock for every process on Linux).

    ``since_ns``: when the main process began reading. A batch shipped before then counts as
    late only from then: the first generators warm up and ship while the main process is
    still starting the others (each spawn start waits for the child to import; 2.5 s each
    under scripts/tui_capture.py, whose main module imports Textual), which is not reading late."""

    def __init__(self, since_ns: int = 0) -> None:
        self._w: dict[int, dict] = {}
        self.since_ns = since_ns

    def on_batch(self, wid: int, n: int, stats: GeneratorStats | None, now_ns: int) -> None:
        if stats is None or stats.shipped is None or stats.shipped_ns is None:
            return  # a batch not stamped by its generator (a lost node's, written by the driver)
        shipped, ship_ns = stats.shipped, stats.shipped_ns
        w = self._w.setdefault(
            wid,
            {
                "reads": collections.deque(),
                "base": 0,
                "received": 0,
                "behind_max_s": 0.0,
                "waiting_max": 0,
                "recent": collections.deque(),
            },
        )
        reads = w["reads"]  # (read at ns, records read by then), oldest first
        while reads and reads[0][0] <= ship_ns:  # reads done by the ship time: in the base
            w["base"] = reads.popleft()[1]
        waiting, behind = shipped - w["base"], max(0, now_ns - max(ship_ns, self.since_ns)) / 1e9
        w["waiting_max"] = max(w["waiting_max"], waiting)
        w["behind_max_s"] = max(w["behind_max_s"], behind)
        w["received"] += n
        reads.append((now_ns, w["received"]))
        w["recent"].append((now_ns, behind, waiting))
        self._forget(w["recent"], now_ns)

    @staticmethod
    def _forget(recent: collections.deque, now_ns: int) -> None:
        while recent and now_ns - recent[0][0] > RECENT_S * 1e9:
            recent.popleft()

    def current(self, worker_arm: list[int], now_ns: int) -> dict[int, tuple[float, int]]:
        """Per arm, how far behind the main process is reading now, for the live header: the
        most seconds a batch read in the last :data:`RECENT_S` had waited since shipping, and
        the most records waiting then (summed over the arm's processes); arms with no batch
        read in that window are absent. Held for the window so that a stall read back in one
        burst stays on screen for a few redraws. Bounded: the batches read in the window."""
        out: dict[int, tuple[float, int]] = {}
        for wid, w in self._w.items():
            self._forget(w["recent"], now_ns)
            if not w["recent"] or not 0 <= wid < len(worker_arm):
                continue
            behind = max(b for _, b, _ in w["recent"])
            waiting = max(n for _, _, n in w["recent"])
            b0, n0 = out.get(worker_arm[wid], (0.0, 0))
            out[worker_arm[wid]] = (max(b0, behind), n0 + waiting)
        return out

    def backlog(self) -> dict[int, Backlog]:
        """Per generator process that shipped a stamped batch: how far behind its records were
        read at most."""
        return {wid: Backlog(w["behind_max_s"], w["waiting_max"]) for wid, w in self._w.items()}


@dataclass(frozen=True, slots=True)
class Backlog:
    """How far behind the main process read one generator's records (:class:`Delivery`)."""

    behind_max_s: float  # the most seconds a batch waited between shipping and being read
    waiting_max: int  # the most records shipped and not yet read at once


@dataclass(frozen=True, slots=True)
class GeneratorHealth:
    """The load generators' health over a session (:func:`generator_health`); stored in the
    session's meta as :meth:`to_dict`."""

    arms: dict[str, dict]  # per arm name: lag P50/P99/max, CPU share, in flight, gap, E2E …
    reasons: list[Reason]  # why the session is degraded (an arm did not get its load)
    notes: list[Reason]  # said, not degrading: lag past the fixed limits, a busy core …
    machine: MachineUse | None  # what the machine was doing (abtui.runner.machine)

    @property
    def degraded(self) -> bool:
        return bool(self.reasons)

    def to_dict(self) -> dict:
        """The meta's ``generator_health``: each reason's and note's code beside its words."""
        return {
            "arms": self.arms,
            "degraded": self.degraded,
            "reasons": self.reasons,
            "reason_codes": codes(self.reasons),
            "notes": self.notes,
            "note_codes": codes(self.notes),
            "machine": None if self.machine is None else self.machine.to_dict(),
        }


def generator_health(
    con, names: list[str], stats: dict[int, ArmGenerators], machine: MachineUse | None = None
) -> GeneratorHealth:
    """The health of each arm's load generators from the session's stored requests (``con``)
    and the generators' own ``stats`` per arm (:func:`per_arm`)."""
    gaps = dict(
        con.execute(  # the mean inter-arrival gap within each segment, as lagguard's
            "SELECT arm, sum(span) / nullif(sum(n - 1), 0) FROM (SELECT arm, count(*) AS n, "
            "(max(scheduled_ns) - min(scheduled_ns)) / 1e9 AS span FROM requests WHERE NOT warmup "
            "GROUP BY arm, run, level, block) GROUP BY arm"
        ).fetchall()
    )
    e2e = dict(
        con.execute(
            "SELECT arm, quantile_cont((last_token_ns - dispatched_ns - COALESCE(connect_ns, 0)) "
            "/ 1e9, 0.5) FROM requests "
            "WHERE NOT warmup AND status = 'ok' AND last_token_ns IS NOT NULL GROUP BY arm"
        ).fetchall()
    )
    rows = con.execute(
        "SELECT arm, quantile_cont(lag, 0.5), quantile_cont(lag, 0.99), max(lag), count(*) "
        "FROM (SELECT arm, (dispatched_ns - scheduled_ns) / 1e9 AS lag FROM requests "
        "WHERE NOT warmup AND dispatched_ns > 0) GROUP BY arm ORDER BY arm"
    ).fetchall()
    arms: dict[str, dict] = {}
    reasons: list[Reason] = []
    notes: list[Reason] = []
    for arm, p50, p99, mx, n in rows:
        st = stats.get(arm) or _NO_STATS
        wall = st.measure_wall_s or 0.0
        share = (st.measure_cpu_s or 0.0) / wall if wall > 0 else None
        name = names[arm]
        arms[name] = {
            "lag_p50_s": p50,
            "lag_p99_s": p99,
            "lag_max_s": mx,
            "requests": n,
            "cpu_share": share,
            "in_flight_max": st.in_flight_max,
            "processes": st.processes,
            "main_behind_max_s": st.main_behind_max_s,
            "records_waiting_max": st.records_waiting_max,
            "gap_s": _num(gaps.get(arm)),
            "e2e_p50_s": _num(e2e.get(arm)),
        }
        gap, e2e50 = arms[name]["gap_s"], arms[name]["e2e_p50_s"]
        lagged = f"{name}: schedule lag P99 {p99 * 1e3:.1f} ms, max {mx * 1e3:.1f} ms"
        if not load_kept(p99, gap, e2e50, DELTA_CENTRAL):
            why = f"{lagged}: {load_words(p99, gap, e2e50, DELTA_CENTRAL)}"
            reasons.append(Reason(Code.LOAD_NOT_KEPT, why))
        elif p99 > LAG_P99_LIMIT_S or mx > LAG_MAX_LIMIT_S:
            notes.append(
                Reason(
                    Code.LAG_PAST_LIMITS,
                    f"{lagged} (past the fixed {LAG_P99_LIMIT_S * 1e3:g} / "
                    f"{LAG_MAX_LIMIT_S * 1e3:g} ms limits), but within {LOAD_GAP_FRACTION:g} of "
                    f"the {gap * 1e3:.1f} ms inter-arrival gap or δ {DELTA_CENTRAL:.0%} of the "
                    f"{e2e50 * 1e3:.0f} ms median E2E: the load was kept; the verdict judges "
                    "whether the lag could explain each call",
                )
            )
        if share is not None and share > CPU_SHARE_WARN:
            busy = f"{name}: its load generator used {100 * share:.0f}% of a core"
            notes.append(Reason(Code.GENERATOR_BUSY, busy))
        behind = st.main_behind_max_s
        if behind is not None and behind > BEHIND_NOTE_S:
            notes.append(
                Reason(
                    Code.MAIN_BEHIND,
                    f"{name}: the main process read the generator's records up to {behind:.1f} "
                    f"s late ({st.records_waiting_max} records waiting at most, held in "
                    "the generator's memory; the schedule is not affected)",
                )
            )
    words = machine_words(machine)
    if words and (reasons or Code.LAG_PAST_LIMITS in codes(notes)):
        notes.append(Reason(Code.MACHINE_BUSY, words))
    return GeneratorHealth(arms, reasons, notes, machine)


def _num(x) -> float:
    return float(x) if isinstance(x, int | float) else float("nan")


@dataclass(frozen=True, slots=True)
class ArmGenerators:
    """One arm's load generators together (:func:`per_arm`): its processes, their in-flight
    most summed, how far behind the main process read them (the latest of its processes; the
    records waiting summed), and the measuring CPU and wall of its busiest process."""

    processes: int = 1
    in_flight_max: int | None = None
    main_behind_max_s: float | None = None
    records_waiting_max: int | None = None
    measure_cpu_s: float | None = None
    measure_wall_s: float | None = None

    @property
    def share(self) -> float | None:
        """The busiest process's CPU share of its measuring wall time."""
        if not self.measure_wall_s or self.measure_wall_s <= 0:
            return None
        return (self.measure_cpu_s or 0.0) / self.measure_wall_s


_NO_STATS = ArmGenerators()  # an arm whose generators sent no figures


def per_arm(
    stats: dict[int, GeneratorStats],
    worker_arm: list[int],
    backlog: dict[int, Backlog] | None = None,
) -> dict[int, ArmGenerators]:
    """Per generator process's stats (and ``backlog``, :meth:`Delivery.backlog`) → per arm: the
    busiest process's CPU share, in-flight summed, the main process's latest read (max) and
    records waiting (each process's most, summed). A process with a backlog but no stats still
    counts as one of its arm's."""
    backlog = backlog or {}
    out: dict[int, ArmGenerators] = {}
    for w in [*stats, *(w for w in backlog if w not in stats)]:
        st, b = stats.get(w), backlog.get(w)
        a = out.get(worker_arm[w])
        a = ArmGenerators(0, 0) if a is None else a
        a = replace(
            a,
            processes=a.processes + 1,
            in_flight_max=a.in_flight_max + ((st.in_flight_max if st else 0) or 0),
        )
        if b is not None:  # the latest read of any of its processes
            a = replace(
                a,
                main_behind_max_s=max(a.main_behind_max_s or 0.0, b.behind_max_s),
                records_waiting_max=(a.records_waiting_max or 0) + b.waiting_max,
            )
        wall = (st.measure_wall_s if st else None) or 0.0
        if wall > 0:
            cpu = st.measure_cpu_s or 0.0
            if cpu / wall >= (a.share if a.share is not None else -1.0):
                a = replace(a, measure_cpu_s=cpu, measure_wall_s=wall)
        out[worker_arm[w]] = a
    return out


def format_health(h: dict) -> list[str]:
    """Lines for the summary: one per arm, then the degraded banner when marked."""
    out = []
    for name, a in (h.get("arms") or {}).items():
        share = a.get("cpu_share")
        cpu = f"{100 * share:.0f}% CPU" if share is not None else "CPU n/a"
        out.append(
            f"  generator {name}: lag P50 {a['lag_p50_s'] * 1e3:.2f} ms, P99 "
            f"{a['lag_p99_s'] * 1e3:.2f} ms, max {a['lag_max_s'] * 1e3:.2f} ms; {cpu}; "
            f"at most {a.get('in_flight_max')} in flight"
        )
        behind = a.get("main_behind_max_s")
        if isinstance(behind, int | float):
            out.append(
                f"    its records read at most {_dur(behind)} after shipping, at most "
                f"{a.get('records_waiting_max')} waiting"
            )
    return out


def _dur(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.1f} s"
