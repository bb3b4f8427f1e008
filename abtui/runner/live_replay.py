"""A saved session re-played (``abtui open``): the live panes' figures at any time ``t`` of the run.

:class:`Replay` reads the session's requests and telemetry once, sorted by completion time into
numpy arrays, and builds for any ``t`` the same :class:`ArmProgress` objects (counts, errors,
in flight, a :class:`LiveArm` with its histograms and throughput series) that the live run's
observer saw with the requests completed by then. Nothing is re-read on a seek and nothing
depends on where the playhead was before: each snapshot is a few prefix look-ups and two
``bincount`` calls per arm (``scripts/bench_replay.py`` measures it on a 100k-request session).

Telemetry at ``t`` is each gauge's last stored reading at or before ``t`` (what the live run
showed then); the end state (:meth:`Replay.end_state`) shows the session's means instead, since
the last reading of a finished run is the idle GPU. The means are over each arm's measured
windows (:mod:`abtui.metrics.windows`, as the diagnosis): not the warm-up, the quality phase,
the idle tail or the other arm's turns under ``alternate``.

:class:`Playhead` is the timeline's state (position, speed, play/pause), with no UI in it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from abtui.metrics.catalogue import per_request_values
from abtui.metrics.live import (
    EDGES,
    GAUGE_HISTORY,
    LO_S,
    PER_DECADE,
    SERIES_S,
    GaugeHistory,
    LiveArm,
    LogHistogram,
)
from abtui.metrics.table import NA
from abtui.metrics.windows import MeasuredWindows, completion_ns
from abtui.runner.observer import ArmProgress, RunInfo
from abtui.store.reader import SessionReader
from abtui.workload.segments import Position, Shape, log_entries

N_BINS = len(EDGES) - 1
RECENT = 256  # requests behind ArmProgress.recent_*_p50_s (as the runner keeps)


def _bins(v: np.ndarray) -> np.ndarray:
    """The fine bin ``LogHistogram.add`` puts each value in; -1 where it skips it. Vectorised;
    values whose log lands within rounding of a bin edge are put in by ``LogHistogram.add``
    itself, so every bin is the one the live run used."""
    out = np.full(len(v), -1, dtype=np.int64)
    use = (v > 0) & np.isfinite(v)
    vu = v[use]
    x = np.log10(vu / LO_S) * PER_DECADE
    k = np.floor(x).astype(np.int64)
    for i in np.flatnonzero(np.abs(x - np.round(x)) < 1e-6):  # rare: ask LogHistogram itself
        h = LogHistogram()
        h.add(float(vu[i]))
        k[i] = int(np.flatnonzero(h.counts)[0])
    out[use] = np.clip(k, 0, N_BINS - 1)
    return out


ROW_SQL = (  # what the replay needs of each measured request (no chunks: they can be millions)
    f"SELECT arm, scheduled_ns, dispatched_ns, COALESCE(done_ns, {NA}),"
    f" COALESCE(first_token_ns, {NA}), COALESCE(last_token_ns, {NA}), COALESCE(n_output, {NA}),"
    " {connect}, {first_output}, {reasoning}, {cached}, COALESCE(n_input, 0), status, error_class FROM requests WHERE NOT warmup ORDER BY req"
)


@dataclass
class _Rows:
    """The stored requests' columns the replay uses (NULL integers as :data:`NA`)."""

    arm: np.ndarray
    scheduled_ns: np.ndarray
    dispatched_ns: np.ndarray
    done_ns: np.ndarray
    first_token_ns: np.ndarray
    last_token_ns: np.ndarray
    n_output: np.ndarray
    connect_ns: np.ndarray
    first_output_ns: np.ndarray  # the answer's first chunk (TTFO); NA when none came
    reasoning_tokens: np.ndarray  # NA when unknown
    cached_tokens: np.ndarray  # NA where the response did not say
    n_input: np.ndarray  # 0 when unknown
    status: np.ndarray
    error_class: np.ndarray

    @classmethod
    def read(cls, rd: SessionReader) -> _Rows:
        # a file before the column took a reasoning stream's first token for its first output
        have = rd.columns("requests")
        col = "first_output_ns" if "first_output_ns" in have else "first_token_ns"
        rows = rd.query(
            ROW_SQL.format(
                connect=rd.connect_sql(),
                first_output=f"COALESCE({col}, {NA})",
                reasoning=f"COALESCE(reasoning_tokens, {NA})"
                if "reasoning_tokens" in have
                else str(NA),
                cached=f"COALESCE(cached_tokens, {NA})" if "cached_tokens" in have else str(NA),
            )
        )
        cols = list(zip(*rows, strict=True)) if rows else [()] * 14
        ints = [np.array(c, dtype=np.int64) for c in cols[:12]]
        strs = [np.array(c, dtype=object) for c in cols[12:]]
        return cls(*ints, *strs)

    def select(self, mask: np.ndarray) -> _Rows:
        return _Rows(*(getattr(self, f.name)[mask] for f in fields(self)))


@dataclass
class _ArmTrack:
    """One arm's requests as prefix arrays over completion order (index k: the first k done)."""

    name: str
    planned: int
    t_ns: np.ndarray  # completion times, sorted
    ok: np.ndarray  # cumulative counts, length n + 1
    cancelled: np.ndarray
    out_tok: np.ndarray
    errors: dict[str, np.ndarray]
    live_t0_ns: int | None  # LiveArm's origin: dispatch of the first non-cancelled completion
    # measured requests (ok, with first and last token), in completion order
    n_meas: np.ndarray  # cumulative count over all completions, length n + 1
    ttft: np.ndarray
    ttft_bin: np.ndarray
    tpot_bin: np.ndarray
    ttfo: np.ndarray  # NaN where no answer chunk came
    ttfo_bin: np.ndarray
    tpot_reasoning_bin: np.ndarray  # the catalogue's tpot_reasoning / tpot_answer, binned
    tpot_answer_bin: np.ndarray
    thinking: np.ndarray  # cumulative: measured requests so far that reasoned before answering
    cached: np.ndarray  # cumulative prompt tokens from the prefix cache, as LiveArm counts them
    cache_prompt: np.ndarray  # cumulative prompt tokens of those responses
    sum_ttft: np.ndarray  # cumulative, length m + 1 (sequential, as LiveArm adds them)
    sum_decode: np.ndarray
    sum_lag: np.ndarray
    sec: np.ndarray  # second of the series each measured request lands in
    tok: np.ndarray
    good: np.ndarray
    tpot: np.ndarray
    # generator view, in dispatch order
    disp_ns: np.ndarray
    lag_max: np.ndarray  # running max of (dispatched - scheduled), s, length n + 1


def _cum(x: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(x)))


def _track(name: str, at: _Rows, slo: dict[str, float]) -> _ArmTrack:
    done = completion_ns(at)
    order = np.argsort(done, kind="stable")
    done = done[order]
    status = at.status[order]
    ok = status == "ok"
    cancelled = status == "cancelled"
    n_out = np.where(at.n_output[order] != NA, at.n_output[order], 0)
    errs = ~ok & ~cancelled
    classes = np.array([c or "other" for c in at.error_class[order]], dtype=object)
    errors = {str(c): _cum(errs & (classes == c)) for c in np.unique(classes[errs])}
    first, last = at.first_token_ns[order], at.last_token_ns[order]
    disp, sched = at.dispatched_ns[order], at.scheduled_ns[order]
    meas = ok & (first != NA) & (last != NA)
    live = np.flatnonzero(~cancelled)
    t0 = int(disp[live[0]]) if len(live) else 0

    # the formulas of LiveArm.add, on every measured request at once
    d, n = disp[meas] + at.connect_ns[order][meas], n_out[meas]
    ttft = (first[meas] - d) / 1e9
    e2e = (last[meas] - d) / 1e9
    out1 = at.first_output_ns[order][meas]
    ttfo = np.where(out1 != NA, (out1 - d) / 1e9, np.nan)
    n_in = at.n_input[order][meas]
    said = (at.cached_tokens[order][meas] != NA) & (n_in > 0)  # as LiveArm.add counts them
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n > 1, (e2e - ttft) / (n - 1), np.nan)
    think, answer = (
        per_request_values(at, k, order)[meas] for k in ("tpot_reasoning", "tpot_answer")
    )
    good = np.ones(len(d), dtype=bool)
    for key, val in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        if key in slo:
            good &= ~(val > slo[key])  # NaN is within (as in LiveArm)
    dorder = np.argsort(at.dispatched_ns, kind="stable")
    lags = (at.dispatched_ns[dorder] - at.scheduled_ns[dorder]) / 1e9
    return _ArmTrack(
        name=name,
        planned=len(done),
        t_ns=done,
        ok=_cum(ok),
        cancelled=_cum(cancelled),
        out_tok=_cum(np.where(ok, n_out, 0)),
        errors=errors,
        live_t0_ns=t0 if len(live) else None,
        n_meas=_cum(meas),
        ttft=ttft,
        ttft_bin=_bins(ttft),
        tpot_bin=_bins(tpot),
        ttfo=ttfo,
        ttfo_bin=_bins(ttfo),
        tpot_reasoning_bin=_bins(think),
        tpot_answer_bin=_bins(answer),
        cached=_cum(np.where(said, at.cached_tokens[order][meas], 0)),
        cache_prompt=_cum(np.where(said, n_in, 0)),
        thinking=_cum(  # as metrics.live.reasoned
            (at.reasoning_tokens[order][meas] > 0) | ((out1 != NA) & (out1 != first[meas]))
        ),
        sum_ttft=_cum(ttft),
        sum_decode=_cum(e2e - ttft),
        sum_lag=_cum(np.maximum(0.0, (disp[meas] - sched[meas]) / 1e9) + (d - disp[meas]) / 1e9),
        sec=(done[meas] - t0) // 1_000_000_000,
        tok=n.astype(np.int64),
        good=np.where(good, n, 0).astype(np.int64),
        tpot=tpot,
        disp_ns=at.dispatched_ns[dorder],
        lag_max=np.concatenate(([0.0], np.maximum.accumulate(np.maximum(lags, 0.0)))),
    )


def _hist(bins: np.ndarray) -> LogHistogram:
    h = LogHistogram()
    b = bins[bins >= 0]
    h.counts = np.bincount(b, minlength=N_BINS).astype(np.int64)
    h.n = len(b)
    return h


def _live_arm(tr: _ArmTrack, m: int, slo: dict[str, float]) -> LiveArm:
    """The LiveArm that had been fed the first ``m`` measured requests."""
    series: deque = deque(maxlen=SERIES_S)
    if m:
        # completion order makes the seconds non-decreasing: the series is every second from
        # the first one seen to the last, the newest SERIES_S of them kept
        first, last = int(tr.sec[0]), int(tr.sec[m - 1])
        lo = max(first, last - SERIES_S + 1)
        k = int(np.searchsorted(tr.sec[:m], lo, side="left"))
        w = last - lo + 1
        tok = np.bincount(tr.sec[k:m] - lo, weights=tr.tok[k:m], minlength=w)
        good = np.bincount(tr.sec[k:m] - lo, weights=tr.good[k:m], minlength=w)
        series.extend([lo + i, int(tok[i]), int(good[i])] for i in range(w))
    return LiveArm(
        slo=dict(slo),
        ttft=_hist(tr.ttft_bin[:m]),
        tpot=_hist(tr.tpot_bin[:m]),
        ttfo=_hist(tr.ttfo_bin[:m]),
        tpot_reasoning=_hist(tr.tpot_reasoning_bin[:m]),
        tpot_answer=_hist(tr.tpot_answer_bin[:m]),
        thinking=bool(tr.thinking[m]),
        _cached=int(tr.cached[m]),
        _cache_prompt=int(tr.cache_prompt[m]),
        _tok=series,
        _sum_ttft=float(tr.sum_ttft[m]),
        _sum_decode=float(tr.sum_decode[m]),
        _sum_lag=float(tr.sum_lag[m]),
        _n_ok=m,
        _t0_ns=tr.live_t0_ns if tr.t_ns.size else None,
    )


@dataclass
class _Gauges:
    """One arm's telemetry: every gauge's readings over time (all of them: the playhead shows
    what was seen at t), and its session mean over the arm's measured windows only."""

    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    means: dict[str, float] = field(default_factory=dict)
    measured: dict[str, np.ndarray] = field(default_factory=dict)  # readings in the windows

    def history_at(self, t_ns: int) -> GaugeHistory:
        """Each gauge's last :data:`GAUGE_HISTORY` readings at or before ``t_ns`` (what the live
        panes' histories showed then)."""
        out = {}
        for key, (ts, vs) in self.series.items():
            i = int(np.searchsorted(ts, t_ns, side="right"))
            if i:
                out[key] = [float(v) for v in vs[max(0, i - GAUGE_HISTORY) : i]]
        return GaugeHistory(out)

    def history_of_session(self) -> GaugeHistory:
        """The end state's histories: each gauge over the arm's measured windows (as its
        mean), the whole run in at most :data:`GAUGE_HISTORY` points (means of equal runs of
        readings), so the finished picture shows the run's course, not the idle GPU after it."""
        out = {}
        for key, v in self.measured.items():
            if len(v) > GAUGE_HISTORY:
                v = np.array([c.mean() for c in np.array_split(v, GAUGE_HISTORY)])
            out[key] = [float(x) for x in v]
        return GaugeHistory(out)

    def at(self, t_ns: int) -> dict[str, float]:
        out = {}
        for key, (ts, vs) in self.series.items():
            i = int(np.searchsorted(ts, t_ns, side="right")) - 1
            if i >= 0:
                out[key] = float(vs[i])
        return out


def _gauges(tel: dict[str, np.ndarray], arm: int, windows: MeasuredWindows) -> _Gauges:
    g = _Gauges()
    if not len(tel.get("arm", [])):
        return g
    sel = tel["arm"] == arm
    keys = np.char.add(
        np.char.add(tel["source"][sel].astype(str), ":"), tel["metric"][sel].astype(str)
    )
    ts, vals = tel["t_ns"][sel].astype(np.int64), tel["value"][sel].astype(float)
    measured = windows.contains(arm, ts)
    for k in np.unique(keys):
        pick = keys == k
        v = vals[pick]
        fin = v[measured[pick] & np.isfinite(v)]
        if len(fin):
            g.means[str(k)] = float(fin.mean())
        if not str(k).endswith(".delta"):  # as the live gauges: counters' deltas are not gauges
            g.series[str(k)] = (ts[pick], v)
            if len(fin):
                g.measured[str(k)] = fin  # the reader orders rows by time
    return g


class Replay:
    """A stored session, ready to give the live figures at any time ``t`` (seconds from the
    first measured request's scheduled start) up to :attr:`duration_s` (the last completion)."""

    def __init__(self, path: str | Path) -> None:
        with SessionReader(path) as rd:
            meta = rd.meta()
            arms = rd.arms()
            table = _Rows.read(rd)
            tel = rd.telemetry()
            windows = MeasuredWindows.read(rd)
            profiled = rd.profile_windows()
        self.path = Path(path)
        self.status: str = meta.get("status") or "unknown"
        self.slo: dict[str, float] = dict((meta.get("spec") or {}).get("slo") or {})
        self.tracks = [
            _track(a["name"], table.select(table.arm == a["arm"]), self.slo) for a in arms
        ]
        self.gauges = [_gauges(tel, a["arm"], windows) for a in arms]
        done = completion_ns(table)
        some = len(done) > 0
        self.t0_ns = int(table.scheduled_ns.min()) if some else 0
        self.end_ns = int(done.max()) if some else 0
        self.duration_s = max(0.0, (self.end_ns - self.t0_ns) / 1e9)
        # the profiling windows (run --profile), seconds into the replay, the arms' merged
        self.profiled = spans_of(profiled, self.t0_ns, self.duration_s)
        # the stored segment log: which sweep level / run / block played when (meta.segments)
        self.shape = Shape.of_meta(meta)
        self.segment_log = sorted(log_entries(meta), key=lambda e: e["t0_ns"])
        self._seg_t0 = np.array([e["t0_ns"] for e in self.segment_log], dtype=np.int64)
        self.info = RunInfo(
            session_name=meta.get("session_name") or self.path.stem,
            session_path=str(path),
            arm_names=[a["name"] for a in arms],
            arm_urls=[a["url"] for a in arms],
            arm_models=[a["model"] for a in arms],
            planned_per_arm=max((tr.planned for tr in self.tracks), default=0),
            load=meta.get("load") or "",
            **_policy_deltas(meta.get("spec") or {}),
        )

    def at(self, t_s: float) -> list[ArmProgress]:
        """Each arm as the live run saw it at ``t_s``: the requests completed by then."""
        t_ns = self.end_ns if t_s >= self.duration_s else self.t0_ns + round(max(t_s, 0) * 1e9)
        out = []
        for tr, g in zip(self.tracks, self.gauges, strict=True):
            p = self._arm(tr, g.at(t_ns), t_ns)
            p.history = g.history_at(t_ns)
            out.append(p)
        return out

    def segment_at(self, t_s: float) -> Position | None:
        """The segment playing at ``t_s`` (the last one started by then, as the live header
        showed it until the next began); None in a plain session or one with no segment log."""
        if not len(self._seg_t0):
            return None
        t_ns = self.t0_ns + round(min(max(t_s, 0.0), self.duration_s) * 1e9)
        i = max(0, int(np.searchsorted(self._seg_t0, t_ns, side="right")) - 1)
        return self.shape.position(self.segment_log[i])

    def end_state(self) -> list[ArmProgress]:
        """Every request completed; the gauges are the session's means, their histories the
        measured run's course (:meth:`_Gauges.history_of_session`)."""
        arms = self.at(self.duration_s)
        for p, g in zip(arms, self.gauges, strict=True):
            p.telemetry = dict(g.means)
            p.history = g.history_of_session()
        return arms

    def _arm(self, tr: _ArmTrack, telemetry: dict[str, float], t_ns: int) -> ArmProgress:
        k = int(np.searchsorted(tr.t_ns, t_ns, side="right"))
        m = int(tr.n_meas[k])
        n_disp = int(np.searchsorted(tr.disp_ns, t_ns, side="right"))
        p = ArmProgress(
            name=tr.name,
            planned=tr.planned,
            done=k,
            ok=int(tr.ok[k]),
            errors={c: int(v[k]) for c, v in tr.errors.items() if v[k]},
            cancelled=int(tr.cancelled[k]),
            in_flight=max(0, n_disp - k),
            output_tokens=int(tr.out_tok[k]),
            schedule_lag_max_s=float(tr.lag_max[n_disp]),
            finished=k == tr.planned,
            telemetry=telemetry,
            live=_live_arm(tr, m, self.slo),
        )
        if m:
            p.recent_ttft_p50_s = float(np.median(tr.ttft[max(0, m - RECENT) : m]))
            tp = tr.tpot[max(0, m - RECENT) : m]
            tp = tp[np.isfinite(tp)]
            if len(tp):
                p.recent_tpot_p50_s = float(np.median(tp))
            to = tr.ttfo[max(0, m - RECENT) : m]
            to = to[np.isfinite(to)]
            if tr.thinking[m] and len(to):
                p.recent_ttfo_p50_s = float(np.median(to))
        return p


SPEEDS = (1, 2, 4, 8, 16, 32, 64)
TARGET_S = 20.0  # the default speed replays a run in at most this long (at 64× if longer)
SEEK_STEP = 0.05  # of the run, per seek key


def default_speed(duration_s: float) -> int:
    """The slowest speed that replays ``duration_s`` within :data:`TARGET_S` (10–20 s for runs
    between 20 s and 21 min)."""
    return next((s for s in SPEEDS if duration_s / s <= TARGET_S), SPEEDS[-1])


def spans_of(wins: list[tuple[int, int, int]], t0_ns: int, duration_s: float):
    """``[(from_s, to_s)]``: the windows ``(arm, start_ns, end_ns)`` as seconds from ``t0_ns``,
    cut to ``[0, duration_s]``, overlapping ones (the arms' of one window) merged."""
    out: list[list[float]] = []
    for lo, hi in sorted(((lo - t0_ns) / 1e9, (hi - t0_ns) / 1e9) for _, lo, hi in wins):
        lo, hi = max(lo, 0.0), min(hi, duration_s)
        if hi <= lo:
            continue
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


@dataclass
class Playhead:
    """Where the replay is and how it moves: position ``t_s``, speed, playing or paused."""

    duration_s: float
    t_s: float = 0.0
    speed: int = 1
    playing: bool = False

    @classmethod
    def at_end(cls, duration_s: float) -> Playhead:
        """Paused at the end state, at the default speed."""
        return cls(duration_s, duration_s, default_speed(duration_s))

    @property
    def at_end_state(self) -> bool:
        return self.t_s >= self.duration_s

    def toggle(self) -> None:
        """Play or pause; playing from the end starts again from the start."""
        if not self.playing and self.at_end_state:
            self.t_s = 0.0
        self.playing = not self.playing and self.duration_s > 0

    def faster(self) -> None:
        self.speed = min(SPEEDS[-1], self.speed * 2)

    def slower(self) -> None:
        self.speed = max(SPEEDS[0], self.speed // 2)

    def seek(self, fraction: float) -> None:
        """Move by ``fraction`` of the run (negative: back)."""
        self.jump(self.t_s + fraction * self.duration_s)

    def jump(self, t_s: float) -> None:
        self.t_s = min(max(t_s, 0.0), self.duration_s)
        if self.at_end_state:
            self.playing = False

    def advance(self, wall_s: float) -> bool:
        """Move on by ``wall_s`` seconds of wall time when playing; True when it moved."""
        if not self.playing:
            return False
        self.jump(self.t_s + wall_s * self.speed)
        return True

    def label(self) -> str:
        state = "▶" if self.playing else "⏸"
        return f"t = {self.t_s:.1f} s / {self.duration_s:.1f} s {state} {self.speed}×"


def _policy_deltas(spec: dict) -> dict[str, float]:
    """The stored spec's noise thresholds (``policy.delta``, ``policy.delta_tail``) where set."""
    pol = spec.get("policy") or {}
    return {
        k: float(pol[k]) for k in ("delta", "delta_tail") if isinstance(pol.get(k), int | float)
    }
