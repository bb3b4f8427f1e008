"""HTML and Markdown reports open with what a team decides from: a degraded
session says DEGRADED before anything else, then summary cards (verdict, primary Δ with its CI,
cost, quality) and the run's metadata (date, duration, abtui version, host, endpoints and
models, workload shape, request counts, arrival process, SLOs, policy)."""

from __future__ import annotations

from html.parser import HTMLParser

from tui_fixtures import write_session

from abtui.report.export import report_data, to_markdown
from abtui.report.html import to_html
from abtui.stats.labels import pct
from abtui.verdict.saved import session_verdict

META_FIELDS = (
    "date",
    "duration",
    "abtui version",
    "host",
    "endpoint bf16",
    "endpoint fp8",
    "workload",
    "requests",
    "arrival process",
    "SLOs",
    "policy",
)


def degraded_session(tmp_path):
    health = {
        "degraded": True,
        "reasons": ["bf16: schedule lag P99 2.1 s (limit 0.1 s)"],
        "notes": [],
    }
    return write_session(
        tmp_path, "slow", n=60, meta={"degraded": True, "generator_health": health}
    )


class Cards(HTMLParser):
    """The report's cards (title, value, detail) and metadata rows, as a browser shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.cards: list[list[str]] = []
        self.meta: dict[str, str] = {}
        self.degraded = ""
        self._in: str | None = None
        self._card = False
        self._meta = False
        self._row: list[str] = []
        self.order: list[str] = []  # the first tag of each kind, in document order

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "")
        if cls == "card":
            self._card = True
            self.cards.append([])
            self.order.append("card")
        elif cls == "meta":
            self._meta = True
        elif cls == "degraded":
            self._in = "degraded"
            self.order.append("degraded")
        elif tag == "table" and not self._meta:
            self.order.append("table")
        elif tag == "svg":
            self.order.append("svg")
        if tag == "tr" and self._meta:
            self._row = []

    def handle_endtag(self, tag):
        if tag == "div" and self._card:
            self._card = False
        if tag == "div" and self._in == "degraded":
            self._in = None
        if tag == "table":
            self._meta = False
        if tag == "tr" and self._meta and len(self._row) == 2:
            self.meta[self._row[0]] = self._row[1]

    def handle_data(self, data):
        if self._card and data.strip():
            self.cards[-1].append(data.strip())
        if self._in == "degraded":
            self.degraded += data
        if self._meta and data.strip():
            self._row.append(data.strip())


def test_a_degraded_sessions_reports_say_degraded_first(tmp_path):
    path = degraded_session(tmp_path)
    sv = session_verdict(path)
    doc = report_data(sv)
    md = to_markdown(sv, doc)
    first_section = md.split("\n## ")[0]
    assert "DEGRADED SESSION" in first_section and "schedule lag P99 2.1 s" in first_section
    page = Cards()
    page.feed(to_html(sv, doc))
    assert "DEGRADED SESSION" in page.degraded and "schedule lag" in page.degraded
    assert page.order[0] == "degraded"  # before the cards and every table
    assert "DEGRADED" in page.cards[0][1]  # the verdict card says it too
    ok = session_verdict(write_session(tmp_path, "fine", n=60))
    assert "DEGRADED" not in to_markdown(ok, report_data(ok))


def test_reports_open_with_summary_cards_and_the_runs_metadata(tmp_path):
    sv = session_verdict(write_session(tmp_path, "cards", n=60, quality=True))
    doc = report_data(sv)
    e = sv.verdict.pairs[0].comparison.get(sv.verdict.policy.primary)
    page = Cards()
    page.feed(to_html(sv, doc))
    titles = [c[0] for c in page.cards]
    assert (
        titles[0] == "Verdict"
        and titles[1].startswith("Primary Δ")
        and titles[2].startswith("Cost")
        and titles[3] == "Quality"
    ), titles
    assert page.cards[0][1] == sv.verdict.result
    assert page.cards[1][1] == pct(e.ratio) and f"[{pct(e.lo)}, {pct(e.hi)}]" in page.cards[1][2]
    assert page.cards[3][1] in ("pass", "FAIL", "undecided")  # quality was measured here
    assert page.order.index("card") < page.order.index("table")  # cards before any table
    for f in META_FIELDS:
        assert f in page.meta, (f, page.meta)
    assert (
        "llama-3-8b-fp8" in page.meta["endpoint fp8"]
        and "127.0.0.1:8002" in page.meta["endpoint fp8"]
    )
    assert "2026-01-02" in page.meta["date"] and page.meta["abtui version"] != "unknown"
    assert "poisson 20 req/s" in page.meta["arrival process"]
    assert "ttft ≤ 200 ms" in page.meta["SLOs"] and "primary P50 E2E" in page.meta["policy"]
    assert "60 sent" in page.meta["requests"]
    md = to_markdown(sv, doc)
    head = md.split("\n## ")[0] + md.split("\n## ")[1]  # the cards, then "## Run"
    assert "| Verdict | Primary Δ" in head and pct(e.ratio) in head and "Quality" in head
    assert md.split("\n## ")[1].startswith("Run")
    for f in META_FIELDS:
        assert f"| {f} |" in md, f
