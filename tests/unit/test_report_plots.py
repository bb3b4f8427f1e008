"""The HTML report's plots and reading order, and what λ* is worth in every format. Sessions are real store files (``SessionWriter``) of seeded records with a real
verdict; the HTML is parsed with ``html.parser`` as a browser would read it: the cards, the
metadata, each ``<svg class="plot">`` and the series drawn in it, the legend's place, the ticks.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest
from tui_fixtures import ARMS, write_session

from abtui.cli import main
from abtui.client.records import OK, RequestRecord
from abtui.report.export import report_data, to_markdown
from abtui.report.html import to_html
from abtui.report.svg import PALETTE, Axis, arm_style
from abtui.store.writer import SessionWriter
from abtui.verdict.saved import session_verdict

RATES = (8.0, 16.0, 24.0)
N_LEVEL = 150  # requests per arm and level


def sweep_session(folder, name="sweep"):
    """Three rate levels; bf16's TTFT grows with the load and misses its SLO (200 ms) at the
    third, fp8 (40% faster) meets it at every level: bf16's λ* is 16 req/s (24 missed), fp8's
    only a lower bound (≥ 24 req/s, the highest load tried)."""
    rng = np.random.default_rng(7)
    recs, t = [], 10**12
    for lv, rate in enumerate(RATES):
        gap = int(1e9 / rate)
        for k in range(N_LEVEL):
            t0 = t + k * gap
            item = lv * N_LEVEL + k
            for arm, scale in ((0, 1.0), (1, 0.6)):
                ttft = float(rng.lognormal(np.log(0.05 * scale * (1, 1.6, 4)[lv]), 0.15))
                tpot = float(rng.lognormal(np.log(0.012 * scale), 0.1))
                n_in = int(rng.integers(64, 4096))
                n_out = int(rng.integers(20, 200))
                first = t0 + 200_000 + int(ttft * 1e9)
                last = first + int(tpot * (n_out - 1) * 1e9)
                recs.append(
                    RequestRecord(
                        arm=arm,
                        item=item,
                        level=lv,
                        scheduled_ns=t0,
                        dispatched_ns=t0 + 200_000,
                        chunk_ns=[first, last],
                        chunk_tokens=[1, n_out - 1],
                        done_ns=last,
                        status=OK,
                        n_output=n_out,
                        n_input=n_in,
                    )
                )
        t += N_LEVEL * gap + 2 * 10**9
    spec = {
        "slo": {"ttft": 0.2},
        "cost": {"gpu_price": 2.0},
        "policy": {"guardrails": ["ttft.p50", "tpot.p50"]},
        "load": {"sweep_rate": list(RATES)},
    }
    path = folder / f"{name}.duckdb"
    w = SessionWriter(path)
    w.write_meta(
        session_name=name,
        spec=spec,
        created="2026-01-05T10:00:00+00:00",
        load="sweep of poisson rates 8,16,24 req/s",
        levels=[
            {"level": k, "rate": r, "concurrency": None, "requests": N_LEVEL}
            for k, r in enumerate(RATES)
        ],
    )
    w.write_arms(ARMS)
    w.add_records(recs)
    w.close(status="complete")
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return sweep_session(tmp_path_factory.mktemp("plots"))


class Page(HTMLParser):
    """What a reader sees: the order of cards / plots / tables, each plot's series and legend
    entries, tick labels per axis, and the svg attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.plots: dict[str, dict] = {}
        self.meta_rows = 0
        self._plot: dict | None = None
        self._in: list[str] = []  # open <g class=…> groups inside the current plot
        self._meta = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if cls == "card":
            self.order.append("card")
        elif tag == "table":
            self._meta = cls == "meta"
            self.order.append("meta" if self._meta else "table")
        elif tag == "svg":
            self._plot = {
                "id": a.get("data-plot"),
                "series": [],
                "legend": [],
                "x": [],
                "y": [],
                "polylines": 0,
                "circles": 0,
                "colors": set(),
                "legend_y": [],
                "area": None,
            }
            self.plots[a.get("data-plot")] = self._plot
            self.order.append("svg")
        if self._plot is None:
            return
        if tag == "g":
            self._in.append(cls)
            if cls == "series":
                self._plot["series"].append(a["data-series"])
        if tag == "rect" and self._plot["area"] is None and a.get("stroke") == "#d0d7de":
            self._plot["area"] = (float(a["y"]), float(a["y"]) + float(a["height"]))
        if tag in ("polyline", "circle") and "series" in self._in:
            self._plot["polylines" if tag == "polyline" else "circles"] += 1
            self._plot["colors"].add(a.get("stroke"))
        if tag == "text" and "legend" in self._in:
            self._plot["legend_y"].append(float(a["y"]))

    def handle_endtag(self, tag):
        if tag == "svg":
            self._plot = None
            self._in = []
        elif tag == "g" and self._in:
            self._in.pop()
        elif tag == "table":
            self._meta = False

    def handle_data(self, data):
        self.text.append(data)
        if self._plot is None or not data.strip():
            return
        if "legend" in self._in:
            self._plot["legend"].append(data.strip())
        elif "axis x" in self._in:
            self._plot["x"].append(data.strip())
        elif "axis y" in self._in:
            self._plot["y"].append(data.strip())
        if self._meta and data.strip():
            self.meta_rows += 1


def parse(sv) -> Page:
    page = Page()
    page.feed(to_html(sv, report_data(sv)))
    return page


def _ticks(labels: list[str]) -> list[str]:
    return labels[:-1]  # the last text of an axis group is its title


def test_html_opens_with_cards_then_plots_then_tables(tmp_path):
    sv = session_verdict(write_session(tmp_path, "ab", n=400))
    page = parse(sv)
    first = {k: page.order.index(k) for k in ("card", "meta", "svg", "table")}
    assert first["card"] < first["meta"] < first["svg"] < first["table"], page.order
    # every key plot comes before the first table; only the workload's histograms come later
    svg_ids = [pid for pid in page.plots]
    key = ["cdf-ttft", "cdf-tpot", "cdf-e2e", "time-ttft", "time-e2e"]
    assert svg_ids[:5] == key and svg_ids[5:] == ["hist-input", "hist-output"], svg_ids
    n_svgs_before_table = page.order[: first["table"]].count("svg")
    assert n_svgs_before_table == 5
    text = "".join(page.text)
    assert text.index("Why") < text.index("TTFT distribution")  # the reasons in words first


def test_each_plot_overlays_both_arms_in_their_own_colours(tmp_path):
    sv = session_verdict(write_session(tmp_path, "ab", n=400))
    page = parse(sv)
    for pid in ("cdf-ttft", "cdf-tpot", "cdf-e2e"):
        p = page.plots[pid]
        assert p["series"] == ["bf16 (n=400)", "fp8 (n=400)"], p["series"]
        assert p["legend"] == p["series"]
        assert p["colors"] == {PALETTE[0], PALETTE[1]}  # baseline blue, candidate orange
        assert _ticks(p["y"]) == ["min", "P50", "P75", "P90", "P95", "P99"], p["y"]
        assert len(_ticks(p["x"])) >= 3, p["x"]  # round-number ticks, not one or two
    for pid in ("time-ttft", "time-e2e"):
        p = page.plots[pid]
        assert p["series"] == ["bf16 P50", "bf16 P90", "fp8 P50", "fp8 P90"]
        assert len(_ticks(p["x"])) >= 3 and len(_ticks(p["y"])) >= 3, (p["x"], p["y"])
    # every prompt has 512 tokens here: a sentence, not a one-bar histogram; each arm drew its
    # own output lengths: one series per arm
    assert not page.plots["hist-input"]["series"]
    assert "every request: 512 input tokens (one length)" in "".join(page.text)
    assert page.plots["hist-output"]["series"] == ["bf16 (n=400)", "fp8 (n=400)"]
    for p in page.plots.values():  # the legend sits below the plot area, never inside it
        if p["area"] is None:  # a sentence instead of a plot (the one prompt length)
            continue
        top, bottom = p["area"]
        assert p["legend_y"] and min(p["legend_y"]) > bottom + 20, (p["id"], p["legend_y"], bottom)
    # the faster arm (fp8, the candidate) is not red, and neither is any other arm
    assert all(
        not c.lower().startswith(("#d62728", "#cf222e", "#ff0000", "#d55e00")) for c in PALETTE
    )
    assert arm_style(0)[1] and not arm_style(1)[1]  # the baseline dashed, candidates solid
    text = "".join(page.text)
    assert "Colours: bf16 blue (dashed), fp8 orange" in text and "whichever arm did better" in text


def test_sweep_plots_number_levels_as_the_tui_and_say_lambda_is_a_lower_bound(sweep):
    sv = session_verdict(sweep)
    doc = report_data(sv)
    page = Page()
    page.feed(to_html(sv, doc))
    ids = list(page.plots)
    for pid in (
        "sweep-e2e-vs-load",
        "sweep-ttft-vs-load",
        "sweep-latency-vs-throughput",
        "sweep-pareto",
    ):
        assert pid in ids, ids
        assert ids.index(pid) < ids.index("hist-input")
    for pid in ("sweep-e2e-vs-load", "sweep-ttft-vs-load", "sweep-latency-vs-throughput"):
        p = page.plots[pid]
        assert p["series"] == ["bf16", "fp8"] and p["circles"] == 6, p
        assert len(_ticks(p["x"])) >= 3, p["x"]
    # the arms' prompt lengths differ in this fixture: one histogram series per arm
    assert page.plots["hist-input"]["series"] == ["bf16 (n=450)", "fp8 (n=450)"]
    pareto = page.plots["sweep-pareto"]
    assert pareto["series"] == ["Pareto front", "bf16", "fp8"] and pareto["circles"] == 6
    html_text = to_html(sv, doc)
    labels = set(re.findall(r">(L\d)</text>", html_text))
    assert labels == {"L1", "L2", "L3"}  # 1-based, as the TUI's "level 1/3"
    assert "SLO TTFT ≤ 200 ms" in html_text  # the SLO as a reference line on TTFT vs load
    # λ*: bf16 16 req/s (24 missed); fp8's is only the highest load tried
    cap = doc["sweep"]["capacity"]
    assert cap["bf16"]["rps"] == 16.0 and not cap["bf16"]["lower_bound"]
    assert cap["bf16"]["above_rps"] == 24.0
    assert cap["fp8"]["rps"] == 24.0 and cap["fp8"]["lower_bound"] is True
    assert cap["fp8"]["text"].startswith("≥ 24 req/s: no level failed")
    assert [p["level_number"] for p in doc["sweep"]["points"]][:2] == [1, 1]
    text = "".join(page.text)
    assert "fp8 ≥ 24 req/s: no level failed (a lower bound, not a capacity" in text
    assert "bf16 16 req/s (24 req/s, the next level tried, missed it)" in text
    md = to_markdown(sv, doc)
    assert "fp8 ≥ 24 req/s: no level failed (a lower bound, not a capacity" in md
    assert re.search(r"\| bf16 \| 1 \| 8\.00 \|", md) and not re.search(r"\| bf16 \| 0 \|", md)


def test_json_and_text_reports_carry_the_lower_bound(sweep, tmp_path, capsys):
    out = tmp_path / "r.json"
    main(["report", str(sweep), "--format", "json", "-o", str(out)])
    doc = json.loads(out.read_text())
    assert doc["sweep"]["capacity"]["fp8"]["lower_bound"] is True
    assert doc["sweep"]["capacity"]["bf16"]["lower_bound"] is False
    capsys.readouterr()
    main(["report", str(sweep)])
    text = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "fp8 ≥ 24 req/s: no level failed (a lower bound, not a capacity" in text


def test_ticks_are_round_numbers_and_more_than_two():
    for lo, hi in ((8, 200), (20, 40), (21, 29), (0.5, 5000), (3.2, 3.9), (12, 120_000)):
        ax = Axis.fit("ms", [lo, hi], "log")
        assert len(ax.ticks) >= 3, (lo, hi, ax.labels)
        assert all(ax.lo <= t <= ax.hi for t in ax.ticks)
        assert all(len(lab) <= 6 for lab in ax.labels), ax.labels
    # 1-2-5 per decade; the axis widened to the next round number when that costs little
    assert Axis.fit("ms", [8, 200], "log").labels == ["5", "10", "20", "50", "100", "200"]
    assert Axis.fit("ms", [22, 250], "log").labels == ["20", "50", "100", "200"]
    assert Axis.fit("ms", [20, 40], "log").labels == ["20", "30", "40"]
    ax = Axis.fit("req/s", [3, 17])
    assert ax.labels == ["0", "5", "10", "15", "20"] and (ax.lo, ax.hi) == (0, 20)
    assert Axis.fit("tok/s", [1234, 98765]).labels[-1] == "100k"


def test_arms_with_the_same_lengths_share_one_histogram_series():
    from abtui.report.plots import histogram

    same = np.array([100, 200, 200, 400, 800] * 10)
    one = Page()
    one.feed(histogram("h", "lengths", "output", [("a", 0, same), ("b", 1, same[::-1])], "both"))
    assert one.plots["h"]["series"] == ["both (n=50)"]
    two = Page()
    two.feed(histogram("h", "lengths", "output", [("a", 0, same), ("b", 1, same + 1)], "both"))
    assert two.plots["h"]["series"] == ["a (n=50)", "b (n=50)"]
