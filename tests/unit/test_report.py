"""`abtui report SESSION --format md|html|json` on a real session whose endpoint and spec carry
hostile strings (model output is untrusted input), the verdict's exit codes, and cost."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from html.parser import HTMLParser

import pytest

from abtui.cli import main
from abtui.cost import ArmCost, arm_cost
from abtui.metrics.summary import ArmSummary
from abtui.report.export import config_diff, md_escape
from abtui.sim.engine import SimConfig
from abtui.sim.process import SimProcess
from abtui.stats.labels import label
from abtui.store.reader import SessionReader

EVIL_MODEL = '<script>alert("model")</script>&amp;'
EVIL_ARM = "<img src=x onerror=alert(1)>|**x**"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    with (
        SimProcess(SimConfig(seed=1, ttft_ms=20, itl_ms=2, jitter_ms=1, model="plain")) as a,
        SimProcess(SimConfig(seed=2, ttft_ms=12, itl_ms=1.2, jitter_ms=1, model=EVIL_MODEL)) as b,
    ):
        spec = d / "evil.toml"
        spec.write_text(
            f"""
name = "evil"
[[arms]]
name = "base"
url = "{a.url}"
gpu_price = 2.0
[[arms]]
name = {json.dumps(EVIL_ARM)}
url = "{b.url}"
gpu_price = 3.0
gpus = 2
params = {{ note = "</td><script>x()</script>" }}
[workload]
requests = 60
input_tokens = 16
output_tokens = 8
[load]
sweep_rate = [20, 40]           # two levels: the reports get a load-sweep section
[slo]
ttft = "100ms"
[store]
dir = "{d}"
"""
        )
        rc = main(["run", str(spec), "--headless"])
    assert rc in (0, 3, 4)
    return d / "evil.duckdb"


def _report(session, fmt, tmp_path, capsys, *extra):
    out = tmp_path / f"r.{fmt}"
    rc = main(["report", str(session), "--format", fmt, "-o", str(out), *extra])
    capsys.readouterr()
    return rc, out.read_text(encoding="utf-8")


def test_html_is_self_contained_and_escapes_every_untrusted_string(session, tmp_path, capsys):
    rc, text = _report(session, "html", tmp_path, capsys)
    assert rc in (0, 3, 4)
    assert "<script" not in text and "<img" not in text and "</td><script>" not in text
    assert "&lt;script&gt;alert(&quot;model&quot;)&lt;/script&gt;&amp;amp;" in text
    assert "&lt;img src=x onerror=alert(1)&gt;|**x**" in text
    assert "<svg" in text and "<polyline" in text  # the latency distributions, inline
    # nothing is loaded from anywhere: no external references at all
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:|//)""", text)
    assert "<link" not in text and "@import" not in text
    assert "Configuration differences" in text and "gpu_price" in text
    assert "Load sweep" in text and "capacity goodput λ*" in text
    # the policy's roles are marked in the metrics table (default primary: P50 E2E)
    assert "<tr><td>P50 E2E</td><td>primary</td>" in text and "<td>guardrail</td>" in text


def test_markdown_escapes_untrusted_strings(session, tmp_path, capsys):
    rc, text = _report(session, "md", tmp_path, capsys)
    assert "<script" not in text and "<img" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;\\|\\*\\*x\\*\\*" in text  # no table break, no bold
    assert "| metric |" in text and "95% CI" in text and "$/Mtok good" in text
    assert "| P50 E2E (primary) |" in text and " (guardrail) |" in text
    assert "## Load sweep" in text and "\\|\\*\\*x\\*\\* | 1 |" in text  # escaped in the sweep too


def test_json_report_holds_the_verdict_and_matches_the_exit_code(session, tmp_path, capsys):
    rc, text = _report(session, "json", tmp_path, capsys)
    doc = json.loads(text)
    assert doc["exit_code"] == rc and doc["result"] in ("GO", "NO-GO", "INCONCLUSIVE")
    assert {0: "GO", 3: "NO-GO", 4: "INCONCLUSIVE"}[rc] == doc["result"]
    assert doc["arms"][1]["name"] == EVIL_ARM and doc["arms"][1]["model"] == EVIL_MODEL
    pair = doc["pairs"][0]
    assert pair["cost"][EVIL_ARM]["usd_per_hour"] == 6.0  # 3 $/GPU-h × 2 GPUs
    keys = {e["key"] for e in pair["comparison"]["effects"]}
    assert {"tpot.p50", "e2e.p99", "goodput.requests", "cost.per_mtok_good"} <= keys
    sweep = doc["sweep"]
    assert {(p["arm"], p["level"]) for p in sweep["points"]} == {
        (a, lv) for a in ("base", EVIL_ARM) for lv in (0, 1)
    }
    assert [p["load_rps"] for p in sweep["points"]][:2] == [20.0, 20.0]
    # the verdict stored in the session is the one reported
    with SessionReader(session) as rd:
        stored = rd.verdicts()[-1]["result"]
    assert stored["result"] == doc["result"]


def test_flags_override_the_stored_policy_and_cost(session, tmp_path, capsys):
    rc, text = _report(
        session, "json", tmp_path, capsys, "--gpu-price", "1", "--primary", "tpot.p50"
    )
    doc = json.loads(text)
    assert doc["policy"]["primary"] == "tpot.p50"
    cost = doc["pairs"][0]["cost"]  # --gpu-price replaces every arm's price; gpus stay
    assert cost["base"]["usd_per_hour"] == 1.0 and cost[EVIL_ARM]["usd_per_hour"] == 2.0
    assert main(["report", str(session), "--primary", "nonsense.p50"]) == 2
    assert "unknown metric" in capsys.readouterr().err


def test_cost_formulas():
    s = ArmSummary(
        arm=0,
        output_tokens_per_s=1000.0,
        total_tokens_per_s=5000.0,
        goodput_output_tokens_per_s=500.0,
        goodput_requests_per_s=4.0,
        requests_per_s=8.0,
        slo={"ttft": 0.1},
    )
    c = arm_cost(s, gpu_price=3.6, gpus=2)  # 7.2 $/h = 0.002 $/s
    assert c.usd_per_mtok_output == pytest.approx(0.002 * 1e6 / 1000)
    assert c.usd_per_mtok_total == pytest.approx(0.002 * 1e6 / 5000)
    assert c.usd_per_mtok_good == pytest.approx(0.002 * 1e6 / 500)
    assert c.usd_per_1k_good_requests == pytest.approx(0.002 * 1e3 / 4)
    s.slo = {}  # no SLO: every ok request is good
    assert arm_cost(s, 3.6, 2).usd_per_mtok_good == pytest.approx(c.usd_per_mtok_output)


def test_cost_non_finite_prices_are_none_only_in_json():
    s = ArmSummary(arm=0, output_tokens_per_s=0.0, total_tokens_per_s=math.nan, requests_per_s=2.0)
    c = arm_cost(s, gpu_price=1.0)
    assert c.usd_per_mtok_output == math.inf and math.isnan(c.usd_per_mtok_total)
    assert c.shown("usd_per_mtok_output") is None and c.shown("usd_per_hour") == 1.0
    d = c.to_dict()
    assert d["usd_per_mtok_output"] is None and d["usd_per_mtok_total"] is None
    assert d["gpus"] == 1 and d["usd_per_1k_good_requests"] == pytest.approx(1e3 / 7200)
    back = ArmCost.from_dict(json.loads(json.dumps(d)))  # a stored verdict read back
    assert math.isnan(back.usd_per_mtok_output) and back.to_dict() == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.gpus = 2


def test_config_diff_and_md_escape():
    arms = [
        {"url": "u1", "model": "m", "api": "chat", "config": {"params": {"top_k": 1}}},
        {"url": "u2", "model": "m", "api": "chat", "config": {"params": {"top_k": 2}}},
    ]
    diff = dict(config_diff(arms, {"cost": {"gpu_price": 2.0}}))
    assert diff == {"url": ["u1", "u2"], "params.top_k": ["1", "2"]}
    assert md_escape("a|b\n<c>") == "a\\|b &lt;c&gt;"


def test_noise_floor_must_be_an_aa_session_and_is_checked_before_running(session, capsys):
    # the endpoints do not exist: the check must fail first, naming the session
    rc = main(
        [
            "run",
            "--baseline",
            "http://127.0.0.1:9/v1",
            "--candidate",
            "http://127.0.0.1:9/v1",
            "--rate",
            "5",
            "--noise-floor",
            str(session),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "is not an A/A session" in err and str(session) in err
    assert main(["report", str(session), "--noise-floor", str(session) + ".missing"]) == 2
    assert "does not exist" in capsys.readouterr().err


# -------------------------------------------------------------- which quality mode ran

QUALITY_PRESET = "h100:llama-3.1-8b:bf16"


@pytest.fixture(scope="module")
def quality_sessions(tmp_path_factory):
    """One real session per quality mode: the same two simulated GPUs, the exact suite."""
    from abtui.sim.preset_cli import PresetOptions

    d = tmp_path_factory.mktemp("qmode")
    sims = [
        SimProcess(SimConfig(seed=3, preset=PresetOptions(QUALITY_PRESET, time_scale=200)))
        for _ in range(2)
    ]
    with sims[0] as a, sims[1] as b:
        paths = {}
        for mode in ("separate", "interleaved"):
            rc = main(
                [
                    "run",
                    "--baseline",
                    a.url,
                    "--candidate",
                    b.url,
                    "--requests",
                    "40",
                    "--rate",
                    "20",
                    "--input-tokens",
                    "16",
                    "--output-tokens",
                    "8",
                    "--quality",
                    "exact",
                    "--quality-mode",
                    mode,
                    "--name",
                    mode,
                    "--sessions-dir",
                    str(d),
                    "--headless",
                ]
            )
            assert rc in (0, 3, 4)
            paths[mode] = d / f"{mode}.duckdb"
    return paths


@pytest.mark.parametrize("mode", ["separate", "interleaved"])
def test_every_report_says_which_quality_mode_ran(quality_sessions, mode, tmp_path, capsys):
    path = quality_sessions[mode]
    with SessionReader(path) as rd:
        meta = rd.meta()
    assert meta["quality_mode"] == mode
    interleaved = mode == "interleaved"
    capsys.readouterr()
    main(["report", str(path)])
    text = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert f"quality mode: {mode}" in text
    assert ("quality: interleaved with the load test" in text) is interleaved  # the summary
    assert ("compare only with sessions run in the same mode" in text) is interleaved
    assert ("sent after the load test" in text) is not interleaved
    if interleaved:  # how many went during the load, from the stored meta
        info = meta["quality_interleaved"]
        assert f"{info['sent_during_load']} of {info['rows']} quality requests" in text
    _, md = _report(path, "md", tmp_path, capsys)
    assert f"quality mode: {mode}" in md
    assert md.index("quality mode:") < md.index("| suite |")  # next to the quality table
    _, html = _report(path, "html", tmp_path, capsys)
    assert f'<p class="quality-mode">quality mode: {mode}' in html
    assert html.index("quality-mode") < html.index("<th>suite</th>")
    doc = json.loads(_report(path, "json", tmp_path, capsys)[1])
    assert doc["quality_mode"]["mode"] == mode
    assert doc["pairs"][0]["quality"]["mode"]["mode"] == mode
    assert ("same mode" in doc["quality_mode"]["note"]) is interleaved


def test_a_session_without_quality_states_no_mode(session, tmp_path, capsys):
    main(["report", str(session)])
    assert "quality mode" not in capsys.readouterr().out
    assert "quality_mode" not in json.loads(_report(session, "json", tmp_path, capsys)[1])


class _Tables(HTMLParser):
    """The rows (cells' text) of every ``table.metrics`` and the items of every ``ol.notes``,
    with the footnote links in each row."""

    def __init__(self) -> None:
        super().__init__()
        self.tables, self.notes, self.ids = [], [], {}
        self._in, self._cell, self._row, self._li = None, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._in = "metrics" if a.get("class") == "metrics" else None
            if self._in:
                self.tables.append([])
        elif tag == "tr" and self._in:
            self._row = {"cells": [], "links": []}
            self.tables[-1].append(self._row)
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "a" and self._row is not None and a.get("href", "").startswith("#"):
            self._row["links"].append(a["href"][1:])
        elif tag == "ol" and a.get("class") == "notes":
            self._in = "notes"
        elif tag == "li" and self._in == "notes":
            self._li = [a.get("id"), ""]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row["cells"].append(self._cell)
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "li" and self._li is not None:
            self.ids[self._li[0]] = self._li[1]
            self.notes.append(self._li[1])
            self._li = None
        elif tag in ("table", "ol"):
            self._in = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._li is not None:
            self._li[1] += data


def test_html_metrics_table_reads_primary_first_one_line_a_row(session, tmp_path, capsys):
    """The metrics table: the primary, then the guardrails, then the rest; no note column
    (notes are numbered footnotes under the table, each row linking to its own); cells never
    wrap, and the widest row fits the page's 1,200 px at 13 px (~7.5 px a character)."""
    _, text = _report(session, "html", tmp_path, capsys)
    _, js = _report(session, "json", tmp_path, capsys)
    doc = json.loads(js)
    parsed = _Tables()
    parsed.feed(text)
    (table,) = parsed.tables
    header, rows = table[0]["cells"], table[1:]
    assert "note" not in header and header[:2] == ["metric", "role"]
    roles = [r["cells"][1] for r in rows]
    n_guard = len(doc["policy"]["guardrails"])
    assert roles[0] == "primary" and roles[1 : 1 + n_guard] == ["guardrail"] * n_guard, roles
    assert "primary" not in roles[1:] and "guardrail" not in roles[1 + n_guard :]
    effects = {label(e["key"]): e for e in doc["pairs"][0]["comparison"]["effects"]}
    assert len(rows) == len(effects)
    noted = 0
    for r in rows:
        name = r["cells"][0].rstrip("0123456789")
        note = effects[name]["note"]
        if note:
            noted += 1
            (link,) = r["links"]
            assert parsed.ids[link] == note, (name, note)
        else:
            assert not r["links"], name
    assert noted and len(parsed.notes) == len(set(parsed.notes)) <= noted
    assert "table.metrics td,table.metrics th{white-space:nowrap}" in text
    widths = [max(len(r["cells"][i]) for r in table) for i in range(len(header))]
    assert sum(7.5 * w + 15 for w in widths) <= 1200, widths


def test_report_reuses_the_verdict_the_run_stored_and_writes_nothing(session, tmp_path, capsys):
    """`abtui report` (and `open`) read the verdict the run stored when it was computed under
    the same policy by the same code, instead of computing it again (15–43 s on a demo
    session); the reports are those of a fresh computation but for the verdict's time. A
    different policy is computed, said on stderr; the file is never written."""
    import shutil

    import duckdb

    fresh = tmp_path / "fresh" / session.name  # the same session, its stored verdict removed
    fresh.parent.mkdir()
    shutil.copy(session, fresh)
    with duckdb.connect(str(fresh)) as con:
        con.execute("DELETE FROM verdicts")

    def report(path, fmt, *extra):
        out = tmp_path / f"{path.parent.name}-{fmt}-{len(extra)}.{fmt}"
        rc = main(["report", str(path), "--format", fmt, "-o", str(out), *extra])
        err = capsys.readouterr().err
        return rc, out.read_text(encoding="utf-8"), err

    with SessionReader(session) as rd:
        rows = rd.verdicts()
    assert rows and rows[-1]["result"]["code_version"]
    created = rows[-1]["result"]["created"]
    for fmt in ("md", "html", "json"):
        rc, reused, err = report(session, fmt)
        assert "computing the verdict" not in err, err  # nothing to wait for
        rc2, computed, err2 = report(fresh, fmt)
        assert "computing the verdict" in err2  # nothing stored: computed, and said
        assert rc == rc2
        computed = computed.replace(str(fresh), str(session))
        if fmt == "json":
            a, b = json.loads(reused), json.loads(computed)
            assert a.pop("created") == created and b.pop("created") != created
            assert a == b
        else:
            assert reused.replace(created, "") == computed.replace(created, "")
    _, other, err = report(session, "md", "--primary", "ttft.p50")  # another question
    assert "computing the verdict" in err and "| P50 TTFT (primary) |" in other
    with SessionReader(session) as rd:
        assert rd.verdicts() == rows  # a read path stores nothing
    with SessionReader(fresh) as rd:
        assert rd.verdicts() == []


def test_the_stored_verdict_keeps_each_reasons_code(session, tmp_path):
    """The JSON holds every reason's code beside its words (``reason_codes`` per pair,
    ``reason_code`` per guardrail, ``note_code`` per row), and the verdict read back from the
    file has the same codes as the one computed afresh, on the same texts."""
    import shutil

    import duckdb

    from abtui.stats.reasons import Code, codes
    from abtui.verdict.saved import session_verdict

    fresh = tmp_path / session.name
    shutil.copy(session, fresh)
    with duckdb.connect(str(fresh)) as con:
        con.execute("DELETE FROM verdicts")
    with SessionReader(session) as rd:
        doc = rd.verdicts()[-1]["result"]
    for p in doc["pairs"]:
        assert len(p["reason_codes"]) == len(p["reasons"])
        assert all(Code(g["reason_code"]) for g in p["guardrails"])
        notes = [(e["note"], e["note_code"]) for e in p["comparison"]["effects"]]
        assert any(c for _, c in notes) and all(bool(t) == bool(c) for t, c in notes)

    def coded(sv):
        out = []
        for p in sv.verdict.pairs:
            out += [*zip(p.reasons, codes(p.reasons), strict=True)]
            out += [(g.reason, g.reason.code) for g in p.guardrails]
            out += [(e.note, getattr(e.note, "code", None)) for e in p.comparison.effects]
        return out

    reused, computed = session_verdict(session), session_verdict(fresh)
    assert reused.verdict.created == doc["created"] != computed.verdict.created  # read back
    got = coded(reused)
    assert got == coded(computed)
    assert {c for _, c in got} >= {Code.GUARDRAIL_UNDECIDED}
    assert all(c is not None for t, c in got if t)  # every sentence has its code


def test_a_stored_verdict_is_not_reused_for_edited_requests(session, tmp_path, capsys):
    """The run's stored verdict answers for the requests it was computed from: a copy of the
    file whose requests were edited afterwards (a later tool, a hand) gets its verdict computed
    again from what the file now holds, never the stale one."""
    import shutil

    import duckdb

    edited = tmp_path / "edited" / session.name
    edited.parent.mkdir()
    shutil.copy(session, edited)
    with duckdb.connect(str(edited)) as con:
        con.execute("UPDATE requests SET last_token_ns = last_token_ns + 1000000 WHERE arm = 1")
    assert main(["report", str(session), "--format", "json", "-o", str(tmp_path / "a.json")]) in (
        0,
        3,
        4,
    )
    assert "computing the verdict" not in capsys.readouterr().err  # unedited: reused
    assert main(["report", str(edited), "--format", "json", "-o", str(tmp_path / "b.json")]) in (
        0,
        3,
        4,
    )
    assert "computing the verdict" in capsys.readouterr().err  # edited: computed again
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    e2e = lambda d: next(  # noqa: E731
        e for e in d["pairs"][0]["comparison"]["effects"] if e["key"] == "e2e.p50"
    )
    assert e2e(b)["b"] > e2e(a)["b"]  # the candidate's E2E now 1 ms longer per request


def test_stored_health_reads_its_codes_back():
    """The generators' stored reasons and notes come back with the codes stored beside them; a
    code this version does not know, or a codes list that does not match, leaves the words."""
    from abtui.report.health import stored_health
    from abtui.stats.reasons import Code, codes

    h = {
        "reasons": ["a: lag P99 2.1 s"],
        "reason_codes": ["load_not_kept"],
        "notes": ["b: read late", "c: odd"],
        "note_codes": ["main_behind", "no_such_code"],
    }
    got = stored_health({"degraded": True, "generator_health": h})
    assert got.reasons == h["reasons"] and codes(got.reasons) == [Code.LOAD_NOT_KEPT]
    assert got.notes == h["notes"] and codes(got.notes) == [Code.MAIN_BEHIND, None]
    got = stored_health({"generator_health": dict(h, reason_codes=[1, 2], note_codes="x")})
    assert codes(got.reasons) == [None] and codes(got.notes) == [None, None]
