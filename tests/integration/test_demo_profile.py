"""``abtui demo --profile`` headless: both simulators profile a window of the load, the run
prints the profile with the Amdahl line of the FP8 candidate's GEMM gain, and the demo sets
the profile's class shares beside the simulator's roofline of the same steps."""

from __future__ import annotations

import re

from abtui.cli import main
from abtui.store.reader import SessionReader


def test_demo_profile_agrees_with_the_roofline_and_bounds_fp8(tmp_path, capsys):
    argv = ["demo", "--headless", "--profile", "--no-quality", "--requests", "120"]
    argv += ["--rate", "20", "--time-scale", "4", "--name", "dp", "--sessions-dir", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Profile: a window of" in out and "left out of the latency figures" in out
    amdahl = re.search(
        r"Amdahl, GEMM/GEMV on bf16: decode (\d+\.\d) % of the time → at most ×(\d+\.\d+) if "
        r"free, ×(\d+\.\d+) if 2× faster; fp8 measured ×(\d+\.\d+) / step",
        out,
    )
    assert amdahl, out
    share, free, half, measured = (float(x) for x in amdahl.groups())
    assert share > 80 and free > 5 and 1.7 < half < 2 and 1.5 < measured <= half + 0.05
    agree = re.search(
        r"demo: the profile against the simulator's roofline .* within (\S+) points", out
    )
    assert agree and float(agree.group(1)) < 2.0, out
    assert re.search(r"  fp8 decode: GEMM/GEMV \d+\.\d % \(roofline \d+\.\d %\)", out)
    traces = sorted(p.name for p in (tmp_path / "dp.traces").iterdir())
    assert traces == ["bf16", "fp8"]
    with SessionReader(tmp_path / "dp.duckdb") as rd:
        doc = rd.meta()["profile"]
    assert [a["name"] for a in doc["arms"]] == ["bf16", "fp8"] and doc["optimises"] == ["gemm"]
