"""scripts/bench_verdict_calibration.py still runs: its smallest configuration, in seconds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path


def _script():
    """scripts/bench_verdict_calibration.py as a module (scripts/ is not a package)."""
    path = Path(__file__).parents[2] / "scripts" / "bench_verdict_calibration.py"
    spec = importlib.util.spec_from_file_location("bench_verdict_calibration", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_calibration_script_smallest_run(tmp_path, capsys):
    mod = _script()
    out = tmp_path / "c.json"
    mod.main(
        [
            "--cells",
            ",".join(mod.CELLS),
            "--scenarios",
            "iid,drift",
            "--n",
            "200",
            "--repeats",
            "3",
            "--repeats-at",
            "quality=2",
            "--jobs",
            "1",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    for head in (
        "### A/A, parallel",
        "### Power",
        "### Vacuous",
        "### A/A, alternating",
        "### Quality",
        "alternating arms (8 blocks)",
        "E2E SLO",
        "Power of the SLO rows",
    ):
        assert head in text
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == (len(mod.CELLS) - 1) * 2 + len(
        mod.QUALITY
    )  # every cell but quality, 2 scenarios
    for c in cells:
        if c["cell"] == "quality":
            assert c["repeats"] == 2 and c["pass"] + c["fail"] + c["neither"] == 2
        else:
            assert c["repeats"] == 3 and sum(c["results"].values()) == 3
            slo_rows = {"slo.attainment", "goodput.requests"}  # only with an SLO
            with_slo = c["cell"] in ("slo", "slopower")
            want = set(mod.ROWS) if with_slo else set(mod.ROWS) - slo_rows
            assert set(c["rows"]) == want, c["cell"]
    # the alternating A/A: rates over each arm's own turns (had the baseline's span
    # covered every turn and the candidate's two fewer: +14.3 % = 16/14 - 1 with 8 blocks)
    alt = next(c for c in cells if c["cell"] == "alt" and c["scenario"] == "iid")
    assert abs(alt["rows"]["throughput.requests"]["ratio_median"]) < 0.01
    assert mod.gate_state({"passed": False, "state": "INCONCLUSIVE"}) == "neither"
    assert mod.gate_state({"passed": True}) == "pass"


def test_calibration_script_busy_client_cells(tmp_path, capsys):
    """The busy-client cells: a baseline lag P99 near 3.4 × the mean stall."""
    mod = _script()
    out = tmp_path / "b.json"
    mod.main(
        [
            "--cells",
            "aa-busy,aa-busybase,power-busy,power40-busy",
            "--scenarios",
            "iid",
            "--n",
            "300",
            "--repeats",
            "2",
            "--jobs",
            "1",
            "--json",
            str(out),
        ]
    )
    assert "### A busy client" in capsys.readouterr().out
    cells = json.loads(out.read_text())["cells"]
    assert len(cells) == 4
    for c in cells:
        assert 6 < c["lag_ms_median"][0] < 16  # lag P99 (ms) of the baseline's busy client
