"""Every command's help: each default said once, two or three examples, and every example a
command line that parses, with flags that exist as written (no abbreviations)."""

from __future__ import annotations

import argparse
import shlex

import pytest

from abtui.cli import build_parser, main
from abtui.errors import UsageError


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, parser) of ``abtui`` and every subcommand, however deep."""
    out, todo = [], [((), build_parser())]
    while todo:
        path, parser = todo.pop(0)
        out.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [((*path, name), sub) for name, sub in action.choices.items()]
    return out


COMMANDS = _commands()
IDS = [" ".join(path) or "abtui" for path, _ in COMMANDS]


def _examples(parser: argparse.ArgumentParser) -> list[list[str]]:
    """The examples of ``parser``'s epilog, each as argv (continuations joined, comments gone)."""
    epilog = parser.epilog or ""
    assert epilog.startswith("examples:\n"), f"{parser.prog}: no examples epilog"
    text = epilog.removeprefix("examples:\n").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def test_the_walk_finds_every_command():
    names = set(IDS)
    assert {
        "abtui",
        "run",
        "demo",
        "open",
        "report",
        "roofline",
        "sim serve",
        "sim predict",
        "workload import",
        "workload inspect",
        "workload synth",
        "engine build",
        "engine models",
        "engine fetch",
        "profile show",
    } <= names


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_help_has_two_or_three_examples_that_parse(path, parser):
    help_text = parser.format_help()
    assert "\nexamples:\n" in help_text
    examples = _examples(parser)
    assert 2 <= len(examples) <= 3, f"{parser.prog}: {len(examples)} examples"
    for argv in examples:
        line = shlex.join(argv)
        assert argv[: 1 + len(path)] == ["abtui", *path], f"{parser.prog} shows {line!r}"
        try:
            args = build_parser().parse_args(argv[1:])
        except UsageError as e:  # the parser's one-line error
            pytest.fail(f"{line!r} does not parse: {e.message}")
        assert getattr(args, "func", None) is not None, line
        # the flags as written exist on the command they run (argparse would accept a prefix)
        target = _parser_for(argv[1:])
        known = {s for a in target._actions for s in a.option_strings}
        for token in argv[1:]:
            if token.startswith("-") and len(token) > 1 and not token[1].isdigit():
                assert token.split("=", 1)[0] in known, f"{line!r}: {token} is not an option"


def _parser_for(argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser an argv runs: follow the command words as far as they go."""
    by_path = dict(COMMANDS)
    path: tuple[str, ...] = ()
    for word in argv:
        if (*path, word) in by_path:
            path = (*path, word)
        else:
            break
    return by_path[path]


@pytest.mark.parametrize(("path", "parser"), COMMANDS, ids=IDS)
def test_each_default_is_said_once(path, parser):
    formatter = parser._get_formatter()
    assert "(default: None)" not in parser.format_help()
    for group in parser._action_groups:
        off_by_default = "by default" in f"{group.title} {group.description or ''}"
        for action in group._group_actions:
            if not action.option_strings or action.help in (None, argparse.SUPPRESS):
                continue
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            text = formatter._expand_help(action)
            name = "/".join(action.option_strings)
            assert text.lower().count("default") <= 1, f"{parser.prog} {name}: {text!r}"
            flag = action.nargs == 0  # store_true / store_false: the flag is the change
            shown = not flag and action.default not in (None, [], "", argparse.SUPPRESS)
            if shown and not off_by_default:
                assert "default" in text, f"{parser.prog} {name}: default {action.default!r} unsaid"


def test_run_help_defaults_are_the_specs(capsys):
    """Help that said a default twice: ``(default 200) (default: None)``; and the numbers are the spec's."""
    from abtui.spec.model import LoadSpec, RequestSpec, WorkloadSpec

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: None" not in out
    assert f"prompt length in tokens (default {WorkloadSpec().input_tokens})" in out
    assert f"alternate: blocks per level (default {LoadSpec().blocks})" in out
    assert f"whole-request timeout (default {RequestSpec().timeout_s:g}s)" in out


@pytest.mark.parametrize(
    ("path", "parser"),
    [c for c in COMMANDS if c[0] in (("roofline",), ("sim", "predict"))],
    ids=["roofline", "sim predict"],
)
def test_the_pure_commands_examples_run(path, parser, capsys):
    for argv in _examples(parser):
        assert main(argv[1:]) == 0, shlex.join(argv)
        assert "TPOT" in capsys.readouterr().out


def test_the_workload_examples_run(tmp_path, monkeypatch, capsys):
    """synth writes what inspect then reads, as the epilogs show them."""
    monkeypatch.chdir(tmp_path)
    by_path = dict(COMMANDS)
    for argv in _examples(by_path[("workload", "synth")]):
        assert main(argv[1:]) == 0, shlex.join(argv)
    assert main(["workload", "inspect", "w.jsonl"]) == 0
    assert "w.jsonl" in capsys.readouterr().out


def _documented_commands():
    """(file:line, argv) of every ``abtui …`` command in README.md's and docs/*.md's code blocks
    (continuation lines joined; shell operators split the line into commands)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        lines, fenced, i = doc.read_text(encoding="utf-8").splitlines(), False, 0
        while i < len(lines):
            line, start = lines[i].strip(), i + 1
            i += 1
            if line.startswith(("```", "~~~")):
                fenced = not fenced
                continue
            if not fenced or not re.search(r"(^|&& )(\$ )?([\w./-]*/)?abtui [a-z]", line):
                continue
            while line.endswith("\\") and i < len(lines):
                line, i = line[:-1] + " " + lines[i].strip(), i + 1
            lex = shlex.shlex(line.removeprefix("$ "), posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            lex.commenters = "#"
            words, argv = list(lex), []
            for word in [*words, ";"]:
                if word in (";", "&&", "||", "&", "|"):
                    if argv and argv[0].endswith("abtui"):
                        yield f"{doc.relative_to(root)}:{start}", argv
                    argv = []
                else:
                    argv.append(word)


DOCUMENTED = list(_documented_commands())


def test_the_docs_show_commands():
    assert len(DOCUMENTED) > 30 and any(w == "README.md:15" for w, _ in DOCUMENTED)


@pytest.mark.parametrize(("where", "argv"), DOCUMENTED, ids=[w for w, _ in DOCUMENTED])
def test_every_documented_command_parses(where, argv):
    try:
        build_parser().parse_args(argv[1:])
    except UsageError as e:
        pytest.fail(f"{where}: {shlex.join(argv)!r} does not parse: {e.message}")
    target = _parser_for(argv[1:])
    known = {s for a in target._actions for s in a.option_strings}
    for token in argv[1:]:
        if token.startswith("--"):
            assert token.split("=", 1)[0] in known, f"{where}: {token} is not an option as written"
