"""Every number a user gives abtui is checked against the one limit table (abtui.limits) before
anything runs: a value out of range is one line naming the field (and the file and line where
there is one), exit 2, no session file and no request. Large real runs still pass."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from abtui import limits
from abtui.cli import main
from abtui.errors import SpecError
from abtui.spec import Spec, load_spec, validate
from abtui.spec import model as spec_model
from abtui.spec.bounds import field_limit

ARMS = (
    '[[arms]]\nname = "a"\nurl = "http://127.0.0.1:9/v1"\n'
    '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:10/v1"\n'
)
FLAGS = [
    "--baseline",
    "http://127.0.0.1:9/v1",
    "--candidate",
    "http://127.0.0.1:10/v1",
    "--headless",
]


def _numeric(t) -> bool:
    return any(k in str(t) for k in ("int", "float"))


def test_every_numeric_field_of_the_spec_has_a_row_in_the_limit_table():
    sections = {f.name: f.type for f in dataclasses.fields(Spec)}
    missing = []
    for name, cls_name in sections.items():
        cls = getattr(spec_model, str(cls_name), None)
        if cls is None and name == "quality":
            from abtui.quality.config import QualitySpec as cls
        if not dataclasses.is_dataclass(cls):
            continue
        section = "arm" if name == "arms" else name
        for f in dataclasses.fields(cls):
            if _numeric(f.type) and "list" not in str(f.type) and "dict" not in str(f.type):
                if field_limit(section, f.name) is None and f.name not in ("gpu_index",):
                    missing.append(f"{section}.{f.name}")
    assert not missing, f"numeric spec fields without a limit: {missing}"
    assert typing.get_type_hints(spec_model.ArmSpec)["gpu_index"]  # an index, checked by NVML


def _run_spec(tmp_path, capsys, body: str, *extra: str) -> tuple[int, str]:
    s = tmp_path / "s.toml"
    s.write_text(body)
    rc = main(["run", str(s), "--headless", "--sessions-dir", str(tmp_path / "sessions"), *extra])
    err = capsys.readouterr().err
    assert not (tmp_path / "sessions").exists(), "refused after the session file was made"
    return rc, err


@pytest.mark.parametrize(
    ("body", "line", "says"),
    [
        (
            ARMS + "[load]\nrate = 1\ngenerators = 100000\n",
            9,
            "load.generators = 100000 is out of range",
        ),
        (
            ARMS + "[load]\nconcurrency = 100000000\n",
            8,
            "load.concurrency = 100000000 is out of range: a whole number from 1 to 16,384",
        ),
        (
            ARMS + "[workload]\nrequests = 100000000000000\n[load]\nrate = 1\n",
            8,
            "workload.requests = 100000000000000 is out of range",
        ),
        (
            ARMS + "[load]\nrate = 1\n[policy]\nresamples = 100000000000\n",
            10,
            "policy.resamples = 100000000000 is out of range: a whole number from 100 to 100,000",
        ),
        (
            ARMS + "[workload]\noutput_tokens = 2147483648\n[load]\nrate = 1\n",
            8,
            "workload.output_tokens = 2147483648 is out of range",
        ),
        (
            ARMS + "[load]\nrate = 1\n[request]\ntimeout_s = 0\n",
            10,
            "request.timeout_s = 0.0 is out of range: a finite number > 0",
        ),
        (
            ARMS + "[load]\nrate = 1\n[request]\n# greedy\ntemperature = nan\n",
            11,
            "request.temperature must be a finite number, got nan",
        ),
        (
            ARMS + '[load]\nrate = 1\n[slo]\nttft = "1e999s"\n',
            10,
            "slo.ttft must be a finite duration",
        ),
        (
            ARMS + '[load]\nrate = 1\n[slo]\ntpot = "1e300s"\n',
            10,
            "slo.tpot = 1e+300 is out of range",
        ),
        (ARMS + "[load]\nrate = inf\n", 8, "load.rate must be a finite number"),
        (
            ARMS.replace(
                'url = "http://127.0.0.1:10/v1"\n',
                'url = "http://127.0.0.1:10/v1"\ngpu_price = 1e400\n',
            )
            + "[load]\nrate = 1\n",
            7,
            "arms[1].gpu_price must be a finite number",
        ),
    ],
)
def test_out_of_range_in_a_spec_file_names_file_line_and_field(tmp_path, capsys, body, line, says):
    rc, err = _run_spec(tmp_path, capsys, body)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"s.toml:{line}: " in err and says in err, err


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            ARMS.replace(
                'url = "http://127.0.0.1:10/v1"\n',
                'url = "http://127.0.0.1:10/v1"\nparams = {max_tokens = 4294967296}\n',
            )
            + "[load]\nrate = 1\n",
            "arms[1].params.max_tokens = 4294967296 is out of range",
        ),
        (
            ARMS.replace(
                'url = "http://127.0.0.1:10/v1"\n',
                'url = "http://127.0.0.1:10/v1"\nparams = {top_p = nan}\n',
            )
            + "[load]\nrate = 1\n",
            "arms[1].params.top_p = nan: not a finite number",
        ),
        (
            ARMS + "[workload]\nrequests = 100000\n[load]\nrate = 1\nruns = 1000\n",
            "workload.requests × load.runs × sweep levels = 100,000 × 1000 × 1 = 100,000,000",
        ),
        (
            ARMS + "[workload]\nrequests = 1\n[load]\nrate = 1\n[quality]\nmargins = {niah = 5}\n",
            "quality.margins.niah = 5 is out of range",
        ),
    ],
)
def test_out_of_range_found_by_the_whole_spec_check_names_the_field(tmp_path, capsys, body, says):
    rc, err = _run_spec(tmp_path, capsys, body)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err, err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--rate", "1", "--generators", "100000"],
            "argument --generators: expected a whole number",
        ),
        (
            ["--concurrency", "1e8"],
            "argument --concurrency: expected a whole number from 1 to 16,384, got '1e8'",
        ),
        (
            ["--rate", "1", "--requests", "100000000000000"],
            "argument --requests: expected a whole number",
        ),
        (
            ["--rate", "1", "--output-tokens", "2147483648"],
            "argument --output-tokens: expected a whole",
        ),
        (["--rate", "nan"], "argument --rate: expected a finite number > 0"),
        (["--rate", "1", "--timeout", "0"], "--timeout = 0.0 is out of range"),
        (["--rate", "1", "--slo", "ttft=1e999s"], "--slo ttft must be a finite duration"),
        (["--rate", "1", "--slo", "e2e=1e9s"], "slo.e2e = 1000000000.0 is out of range"),
        (["--rate", "1", "--duration", "1e999s"], "--duration must be a finite duration"),
        (["--sweep-rate", "1,inf"], "argument --sweep-rate: expected a finite number > 0"),
        (["--rate", "1", "--seed", "-1"], "argument --seed: expected a whole number from 0"),
        (
            ["--rate", "1", "--input-dist", "uniform:1:1e300"],
            "workload.input_dist: 'uniform:1:1e300': uniform's length = 1e+300 is out of range",
        ),
        (["--rate", "1", "--output-dist", "fixed:inf"], "fixed's length = inf is out of range"),
        (
            ["--rate", "1", "--input-dist", "lognormal:512:1e6"],
            "lognormal's spread = 1000000.0 is out of range: a finite number from 0 to 10",
        ),
    ],
)
def test_out_of_range_flags_are_refused_naming_the_flag(tmp_path, capsys, flags, says):
    rc = main(["run", *FLAGS, "--sessions-dir", str(tmp_path / "s"), *flags])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "s").exists()


def test_generators_are_capped_at_what_this_machine_can_use_and_say_so(monkeypatch):
    monkeypatch.setattr(limits, "usable_cpus", lambda: 4)
    spec = Spec()
    spec.arms = [
        spec_model.ArmSpec("a", "http://127.0.0.1:9/v1"),
        spec_model.ArmSpec("b", "http://127.0.0.1:10/v1"),
    ]
    spec.load.rate, spec.load.generators = 1.0, 4  # 2 arms × 4 = 8 = 2 per CPU × 4 CPUs
    validate(spec, "x")
    spec.load.generators = 5
    with pytest.raises(
        SpecError,
        match=r"2 arms × 5 generator processes; this machine has 4 "
        r"usable CPUs, so at most 4 per arm",
    ) as e:
        validate(spec, "x")
    assert e.value.hint.startswith("use --generators 4")
    spec.load.generators, spec.ray.address = 100, "auto"  # Ray actors: a fixed cap per arm
    validate(spec, "x")
    spec.load.generators = 100_000
    with pytest.raises(
        SpecError, match="load.generators = 100000 is out of range: a whole number from 1 to 256"
    ):
        validate(spec, "x")


def test_large_real_runs_still_pass(tmp_path):
    s = tmp_path / "big.toml"
    s.write_text(
        ARMS + "[workload]\nrequests = 1000000\ninput_tokens = 128000\noutput_tokens = "
        "32768\n[load]\nconcurrency = 4096\nruns = 3\n[request]\ntimeout_s = 3600\n"
        "temperature = 1.0\n[policy]\nresamples = 10000\n"
        '[slo]\nttft = "2s"\ne2e = "10m"\n'
    )
    spec, _ = load_spec(s)
    validate(spec, str(s))
    assert spec.workload.requests == 10**6 and spec.load.concurrency == 4096
    # ... and as flags
    from abtui.cli import build_parser

    args = build_parser().parse_args(
        ["run", *FLAGS, "--requests", "1e6", "--concurrency", "4096", "--rate", "20000"]
    )
    assert (args.requests, args.concurrency, args.rate) == (10**6, 4096, 20000.0)


def test_a_stored_policy_out_of_range_is_refused_not_allocated():
    from abtui.verdict.policy import evaluate
    from tests.synthetic import ArmTruth, synthetic_table

    t = synthetic_table(20, [ArmTruth(), ArmTruth()], seed=1)
    with pytest.raises(SpecError, match=r"policy.resamples = 100000000000 is out of range"):
        evaluate(t, [{"name": "a"}, {"name": "b"}], {"policy": {"resamples": 10**11}})


# --- workload files: every numeric field in its range, named by file, line and field ---


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"input_tokens": 10**11}, "input_tokens = 100000000000 is out of range"),
        ({"prompt": "x", "max_tokens": 2**31}, "max_tokens = 2147483648 is out of range"),
        ('{"prompt": "x", "arrival_s": Infinity}', "arrival_s = inf is out of range"),
        ('{"prompt": "x", "arrival_s": NaN}', "arrival_s = nan is out of range"),
        ({"prompt": "x", "arrival_s": 1e308}, "arrival_s = 1e+308 is out of range"),
        ({"input_tokens": 8, "prefix_ids": [2**70]}, "prefix_ids[…] = 1180591620717411303424"),
        ({"input_tokens": 8, "block_tokens": 10**9}, "block_tokens = 1000000000 is out of"),
        (
            '{"messages": [{"role": "user", "content": "x", "w": NaN}]}',
            "the line.messages[0].w = nan: not a finite number",
        ),
    ],
)
def test_workload_lines_out_of_range_are_refused_before_the_run(tmp_path, capsys, line, says):
    w = tmp_path / "w.jsonl"
    w.write_text(
        '{"prompt": "ok"}\n' + (line if isinstance(line, str) else json.dumps(line)) + "\n"
    )
    rc = main(["workload", "inspect", str(w)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{w}:2: " in err and says in err, err
    rc = main(
        ["run", *FLAGS, "--workload", str(w), "--rate", "1", "--sessions-dir", str(tmp_path / "s")]
    )
    err = capsys.readouterr().err
    assert rc == 2 and f"{w}:2: " in err and says in err, err
    assert not (tmp_path / "s").exists()


def test_the_docs_state_every_row_of_the_limit_table():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "reliability.md").read_text()
    for key, limit in limits.LIMITS.items():
        words = limits.describe(limit).replace("a whole number ", "whole, ")
        words = words.replace("a finite number ", "")
        assert f"| `{key}` | {words} | {limit.why} |" in text, key
