"""Errors a user trips on say what went wrong once: a flag typo gets one
``abtui run:`` prefix (it printed ``abtui: abtui: unrecognized arguments``), the closest flag
and the subcommand's help; a session file cut short says it is damaged, names the user's
file (not abtui's private copy) and does not send anyone to check permissions."""

from __future__ import annotations

import pytest
from tui_fixtures import write_session

from abtui.cli import main


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (
            ["run", "--baseline", "http://127.0.0.1:9/v1", "--candiate", "http://127.0.0.1:9/v1"],
            "abtui run: unrecognized argument --candiate; did you mean --candidate? "
            "(hint: see `abtui run --help`)",
        ),
        (
            ["report", "x.duckdb", "--fromat", "html"],
            "abtui report: unrecognized arguments --fromat html; did you mean --format? "
            "(hint: see `abtui report --help`)",
        ),
        (["--bogus"], "abtui: unrecognized argument --bogus (hint: see `abtui --help`)"),
        (
            ["run", "--rate", "x"],
            "abtui run: argument --rate: expected a number, got 'x' (hint: see `abtui run --help`)",
        ),
    ],
)
def test_a_flag_typo_gets_one_prefix_a_suggestion_and_the_subcommands_help(argv, want, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip() == want, err
    assert "abtui: abtui" not in err


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> bytes:
    return write_session(tmp_path_factory.mktemp("cut"), "whole", n=200, verdict=False).read_bytes()


@pytest.mark.parametrize("keep", [512, 12288, 300_000, 1_000_000])
def test_a_session_file_cut_short_says_damaged_not_permissions(tmp_path, capsys, keep, whole):
    assert len(whole) > keep
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(whole[:keep])
    assert main(["report", str(cut)]) == 2
    err = capsys.readouterr().err
    assert f"session file {cut} is damaged" in err, err
    assert "permission" not in err and "abtui-session-" not in err, err
