"""Spec files and flags: typed, validated, and errors that name the file and the field."""

import pytest

from abtui.errors import SpecError
from abtui.spec import load_spec, parse_duration, parse_slo_string, spec_from_dict, validate

GOOD = """
name = "fp8-vs-bf16"

[[arms]]
name = "bf16"
role = "baseline"
url = "http://127.0.0.1:8001/v1/"

[[arms]]
name = "fp8"
url = "http://127.0.0.1:8002/v1"
api_key_env = "FP8_KEY"
params = { top_k = 1 }

[workload]
requests = 50
input_tokens = 64
output_tokens = 16

[load]
rate = 5
arrival = "constant"

[slo]
ttft = "500ms"
tpot = 0.05

[request]
timeout = "30s"
api = "chat"
"""


def write(tmp_path, text, name="spec.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_spec_loads_and_validates(tmp_path):
    spec, text = load_spec(write(tmp_path, GOOD))
    spec = validate(spec)
    assert text.startswith("\nname")
    assert [a.name for a in spec.arms] == ["bf16", "fp8"]
    assert spec.arms[0].url == "http://127.0.0.1:8001/v1"  # trailing slash dropped
    assert spec.arms[1].params == {"top_k": 1}
    assert spec.arms[1].api == "chat"  # inherited from [request]
    assert spec.workload.requests == 50 and spec.load.rate == 5.0
    assert spec.slo == {"ttft": 0.5, "tpot": 0.05}
    assert spec.request.timeout_s == 30.0


def test_baseline_is_moved_first(tmp_path):
    spec = spec_from_dict(
        {
            "arms": [
                {"name": "b", "url": "http://h/v1"},
                {"name": "a", "url": "http://h2/v1", "role": "baseline"},
            ],
            "load": {"concurrency": 2},
        }
    )
    spec = validate(spec)
    assert [a.name for a in spec.arms] == ["a", "b"]


@pytest.mark.parametrize(
    "mutation, needle",
    [
        (("[load]\nrate = 5", "[load]\nrat = 5"), "load: unknown key 'rat'"),
        (("rate = 5", 'rate = "fast"'), "load.rate must be a number"),
        (("requests = 50", "requests = 5.5"), "workload.requests must be an integer"),
        (('ttft = "500ms"', 'ttft = "soon"'), "slo.ttft must be a duration"),
        (('ttft = "500ms"', 'ttfb = "5ms"'), "unknown SLO 'ttfb'"),
        (('name = "fp8-vs-bf16"', 'nmae = "x"'), "unknown key 'nmae'"),
        (
            ('url = "http://127.0.0.1:8002/v1"', 'url = "http://127.0.0.1:8002"'),
            "does not end in /v1",
        ),
        (('url = "http://127.0.0.1:8002/v1"', 'url = "ftp://x/v1"'), "is not an http(s) URL"),
        (('arrival = "constant"', 'arrival = "bursty"'), "load.arrival must be one of"),
        (('name = "fp8"', 'name = "bf16"'), "arm names must be unique"),
        (('name = "fp8-vs-bf16"', 'name = "has space"'), "must be letters, digits"),
    ],
)
def test_bad_specs_name_the_field(tmp_path, mutation, needle):
    old, new = mutation
    assert old in GOOD
    p = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as e:
        validate(load_spec(p)[0], str(p))
    assert needle in str(e.value)


def test_toml_syntax_error_names_line(tmp_path):
    p = write(tmp_path, "[load\nrate = 1\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert "spec.toml: not valid TOML" in str(e.value) and "line 1" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.toml")


def test_needs_two_arms_and_a_load():
    with pytest.raises(SpecError, match="at least two arms"):
        validate(
            spec_from_dict({"arms": [{"name": "a", "url": "http://h/v1"}], "load": {"rate": 1}})
        )
    with pytest.raises(SpecError, match="set load.rate"):
        validate(
            spec_from_dict(
                {"arms": [{"name": "a", "url": "http://h/v1"}, {"name": "b", "url": "http://h/v1"}]}
            )
        )


def test_arm_missing_url():
    with pytest.raises(SpecError, match=r"arms\[0\]: missing required key url"):
        spec_from_dict({"arms": [{"name": "a"}]})


def test_durations_and_slo_strings():
    assert parse_duration("500ms", "x") == 0.5
    assert parse_duration("2m", "x") == 120.0
    assert parse_duration(3, "x") == 3.0
    assert parse_duration("250us", "x") == pytest.approx(250e-6)
    with pytest.raises(SpecError):
        parse_duration(-1, "x")
    with pytest.raises(SpecError):
        parse_duration(True, "x")
    assert parse_slo_string("ttft=500ms, tpot=50ms") == {"ttft": 0.5, "tpot": 0.05}
    with pytest.raises(SpecError, match="not KEY=DURATION"):
        parse_slo_string("ttft")


def test_an_unknown_key_names_its_line_and_the_closest_valid_one(tmp_path):
    p = write(tmp_path, GOOD.replace("[load]\nrate = 5", "[load]\nconcurency = 5", 1))
    line = GOOD.splitlines().index("[load]") + 2
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.message == f"{p}:{line}: load: unknown key 'concurency'"
    assert e.value.hint.startswith("did you mean 'concurrency'?")
    assert "read_timeout" not in e.value.hint  # aliases of other sections are not offered
    p = write(tmp_path, GOOD + "\n[polcy]\nalpha = 0.1\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert e.value.message == f"{p}:{len(GOOD.splitlines()) + 2}: unknown key 'polcy'"
    assert "did you mean 'policy'?" in e.value.hint
    p = write(tmp_path, GOOD.replace("[load]\nrate = 5", "[load]\nzzz = 5", 1))
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert "did you mean" not in e.value.hint and "known keys here:" in e.value.hint


def test_run_help_says_each_default_once_and_lists_the_valid_keys(capsys):
    from abtui.cli import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    assert "(default: None)" not in out and "(default 200) (default" not in out
    assert "one of the two is needed" in out and "examples:" in out
    flat = " ".join(out.split())
    assert "keys: ttft, ttft_user, ttfo, tpot, tpot_reasoning, tpot_answer, e2e, itl" in flat
    assert "STAT one of mean, p50, p90, p95, p99" in flat and "cost.per_mtok_good" in flat


def test_the_ray_and_ablation_tables_are_read_from_a_spec_file(tmp_path):
    p = write(tmp_path, GOOD + '\n[ray]\naddress = "auto"\nplacement = "pack"\n')
    spec = load_spec(p)[0]
    assert (spec.ray.address, spec.ray.placement) == ("auto", "pack")


def test_an_slo_without_a_unit_is_refused_not_read_as_seconds(tmp_path, capsys):
    """``--slo ttft=500`` meant 500 s (stored as 500,000 ms, attainment 100 %): a duration
    string needs its unit, on the command line and in a spec's [slo] (a TOML number stays
    seconds, as for every duration); the help says so."""
    from abtui.cli import build_parser, main
    from abtui.errors import SpecError
    from abtui.spec import parse_slo_string

    with pytest.raises(SpecError) as e:
        parse_slo_string("ttft=500,tpot=50ms")
    assert "'500' has no unit" in e.value.message and "500ms" in e.value.hint
    assert parse_slo_string("ttft=500ms,tpot=0.05s") == {"ttft": 0.5, "tpot": 0.05}
    rc = main(
        [
            "run",
            "--baseline",
            "http://127.0.0.1:9/v1",
            "--candidate",
            "http://127.0.0.1:9/v1",
            "--slo",
            "ttft=500",
            "--headless",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--slo ttft: '500' has no unit" in err, err
    spec = tmp_path / "s.toml"
    spec.write_text(
        '[[arms]]\nname = "a"\nurl = "http://127.0.0.1:9/v1"\nrole = "baseline"\n'
        '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:9/v1"\n'
        '[slo]\nttft = "500"\ntpot = 0.05\n'
    )
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    assert "slo.ttft: '500' has no unit" in e.value.message
    run_help = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions
        if "--slo" in a.option_strings
    ).help
    assert "unit" in run_help and "bare number is refused" in run_help
