"""Where a run finds an arm's trace files: a folder's files written since the window opened,
those named with the arm's prefix when several servers write to the same folder."""

from __future__ import annotations

import os
import time

from abtui.runner.profiling import _find, prefix_of
from abtui.sim.profiler import PREFIX


def test_a_shared_folder_gives_each_arm_its_own_files(tmp_path):
    now = time.time()
    old = tmp_path / "rank0.1.pt.trace.json.gz"
    old.write_bytes(b"x")
    os.utime(old, (now - 3600, now - 3600))  # an earlier run's
    for name in (
        "abtui_bf16_rank0.2.pt.trace.json.gz",
        "abtui_fp8_rank0.3.pt.trace.json.gz",
        "abtui_fp8x-7-TP-0.trace.json.gz",  # another arm's (SGLang's naming)
    ):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "rank0.profiler_out.txt").write_text("table")  # vLLM's, not a trace
    assert [p.name for p in _find([tmp_path], now - 1, prefix_of("fp8"))] == [
        "abtui_fp8_rank0.3.pt.trace.json.gz"
    ]
    # a server that ignored the prefix (SGLang): every new trace file is the arm's
    assert [p.name for p in _find([tmp_path], now - 1, prefix_of("fp8x"))] == [
        "abtui_fp8x-7-TP-0.trace.json.gz"
    ]
    assert len(_find([tmp_path], now - 1, prefix_of("int4"))) == 3
    assert _find([old], now, "x") == [old]  # a file named outright, whatever its age


def test_the_prefix_is_one_vllm_accepts_whatever_the_arm_is_called():
    for arm in ("fp8", "fp8+spec", "a b/c", "é" * 300):
        assert PREFIX.fullmatch(prefix_of(arm)), arm


def test_a_sweep_level_reads_the_files_written_before_the_next_window(tmp_path):
    now = time.time()
    first, second = tmp_path / "abtui_a_rank0.1.json", tmp_path / "abtui_a_rank0.2.json"
    for p, t in ((first, now - 100), (second, now - 10)):
        p.write_text("{}")
        os.utime(p, (t, t))
    # level 1's window opened 120 s ago, level 2's 50 s ago: each its own trace
    assert _find([tmp_path], now - 120, prefix_of("a"), until=now - 50) == [first]
    assert _find([tmp_path], now - 50, prefix_of("a")) == [second]
