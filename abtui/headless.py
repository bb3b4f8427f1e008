"""A run without the UI: the spec run to its end with progress lines on stderr, then the
session's summary, diagnosis and verdict printed, and the exit code.

The command line uses it for ``--headless`` (and whenever stdout is not a terminal); programs
that drive abtui from Python (the engine experiments, scripts) call :func:`run_spec_file` or
:func:`run_headless` instead of going through the command line.

Exit codes: the verdict's (0 GO, 3 NO-GO, 4 INCONCLUSIVE) for a complete run; 130 for an
interrupted one (its verdict is still printed and stored, and cannot be GO); 1 when the run
failed; 2 for bad input (:class:`~abtui.errors.AbtuiError`), 5 when the session file could not
be written (:class:`~abtui.errors.StoreWriteError`: disk full; the file says ``write_failed``).
``gate=False`` (the demo): 0 for any complete run.
"""

from __future__ import annotations

import sys
from pathlib import Path


def load_checked_spec(path: str | Path | None = None, apply=None):
    """``(spec, text)``: the spec file at ``path`` (or the defaults), ``apply(spec)`` laid over it
    (the command line's flags), validated; a noise-floor session it names is opened now, so that a
    bad one fails before the run rather than after it."""
    from abtui.spec import Spec, load_spec, validate

    if path:
        spec, text = load_spec(str(path))
        source = str(path)
    else:
        spec, text, source = Spec(), "", "command line"
    if apply is not None:
        spec = apply(spec)
    spec = validate(spec, source)
    if spec.policy.noise_floor:
        from abtui.verdict.saved import load_noise_floor

        load_noise_floor(spec.policy.noise_floor)
    return spec, text


def run_headless(
    spec,
    text: str = "",
    *,
    overwrite: bool = False,
    items=None,
    gate: bool = True,
    generators=None,
) -> int:
    """Run ``spec`` with progress lines on stderr; print the summary and verdict on stdout
    (``generators``: prestarted, :class:`~abtui.runner.prestart.Prestarted`)."""
    from abtui.report.console import HeadlessObserver
    from abtui.runner.session import run_session

    obs = HeadlessObserver(sys.stderr)
    result = run_session(spec, text, obs, overwrite=overwrite, items=items, generators=generators)
    return report_run(result, gate)


def run_spec_file(path: str | Path, *, overwrite: bool = False) -> int:
    """``abtui run PATH --headless [--overwrite]``, from Python: a user error (a bad spec, an
    endpoint that does not answer) is printed as the command line prints it, one line on stderr,
    and returned as its exit code (2) instead of raised."""
    from abtui.errors import AbtuiError
    from abtui.report.untrusted import inert

    try:
        spec, text = load_checked_spec(path)
        return run_headless(spec, text, overwrite=overwrite)
    except AbtuiError as e:
        hint = f" (hint: {e.hint})" if e.hint else ""
        print(inert(f"abtui: {e.message}{hint}"), file=sys.stderr)
        return e.exit_code


def report_run(result, gate: bool = True, verdict=None) -> int:
    """After a run (headless or under the TUI): the summary, diagnosis and verdict printed on
    stdout; the exit code (see the module's docstring). ``verdict``: the run's verdict already
    computed and stored (the TUI's, a ``SessionVerdict`` of ``result.path``), printed as it is
    instead of computed again (it took 15–49 s after the demo's TUI closed).

    The file is opened once for all of it (its connection, checks and request table: four
    opens took ~0.1 s of a small run's end), and closed before the verdict is stored."""
    from abtui.report.console import print_session_summary
    from abtui.report.diagnosis import print_diagnosis
    from abtui.report.profile import print_profile
    from abtui.store.reader import SessionReader

    with SessionReader(result.path, keep_tables=True) as rd:
        print_session_summary(rd, sys.stdout)
        print_diagnosis(rd, sys.stdout)
        print_profile(rd, sys.stdout)
        if result.status not in ("complete", "interrupted"):
            return 1
        if verdict is not None and Path(verdict.path) == Path(result.path):
            from abtui.report.verdict_text import print_verdict

            print_verdict(verdict, sys.stdout)
            sv = verdict
        else:  # the run's own verdict, kept in its file (rd closed first)
            sv = print_session_verdict(rd, store=True)
    rc = 130 if result.status == "interrupted" else sv.exit_code if gate else 0
    if rc != sv.exit_code:  # the verdict's last line named its own code: say which one counts
        why = "the run was interrupted" if rc == 130 else "the demo does not gate on its verdict"
        from abtui.report.console import say

        say(f"exit code {rc}: {why} (the verdict's own would be {sv.exit_code})", sys.stdout)
    return rc


def print_session_verdict(
    path, cost: dict | None = None, policy: dict | None = None, store: bool = False
):
    """The verdict of the session at ``path`` (or an open reader of it) printed on stdout
    (computed; stored in the file only with ``store``: the run that wrote it); returned."""
    from abtui.report.console import computing
    from abtui.report.verdict_text import print_verdict
    from abtui.verdict.saved import session_verdict

    name = getattr(path, "path", path)  # a reader's file
    sv = session_verdict(
        path, cost=cost or {}, policy=policy or {}, store=store, computing=lambda: computing(name)
    )
    print_verdict(sv, sys.stdout)
    return sv
