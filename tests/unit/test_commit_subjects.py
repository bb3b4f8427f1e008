"""scripts/check_commit_subjects.py on a real git repository made here: a subject over 72
characters after the start commit is named and fails the check; older ones do not."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_commit_subjects.py"


def _load():
    spec = importlib.util.spec_from_file_location("check_commit_subjects", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _commit(repo: Path, subject: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    (repo / "f").write_text(subject)
    subprocess.run(["git", "-C", str(repo), "add", "f"], check=True, env=env)
    subprocess.run(
        ["git", "-C", str(repo), "commit", "-q", "-m", subject, "-m", "body " * 40],
        check=True,
        env=env,
    )
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_long_subjects_after_the_start_are_named(tmp_path, monkeypatch, capsys):
    mod = _load()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _commit(tmp_path, "an old subject " + "x" * 80)  # before the rule: not checked
    start = _commit(tmp_path, "the rule starts here")
    _commit(tmp_path, "a short subject")
    monkeypatch.chdir(tmp_path)
    assert mod.main(["--since", start]) == 0
    long = _commit(tmp_path, "y" * 73)
    assert mod.main(["--since", start]) == 1
    err = capsys.readouterr().err
    assert long in err and "73 chars" in err and "old subject" not in err


def test_a_history_without_the_start_commit_checks_nothing(tmp_path, monkeypatch, capsys):
    mod = _load()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    _commit(tmp_path, "z" * 100)
    monkeypatch.chdir(tmp_path)
    assert mod.main(["--since", "0123abc"]) == 0
    assert "nothing checked" in capsys.readouterr().out


@pytest.mark.skipif(not (SCRIPT.parents[1] / ".git").exists(), reason="not a git checkout")
def test_this_repository_keeps_the_rule(monkeypatch):
    monkeypatch.chdir(SCRIPT.parents[1])
    assert _load().main([]) == 0
