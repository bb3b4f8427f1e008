"""Load generators started before their plans (abtui.runner.prestart): real spawned processes.
A run that launches them is tested end to end (tests/integration/test_run_e2e.py); here, the
ones a run never launches (a bad endpoint, a stop before the launch) must end."""

from __future__ import annotations

import time

import pytest

from abtui.runner.prestart import Prestarted, generator_names
from abtui.spec import spec_from_dict, validate


def test_names_follow_the_worker_order():
    spec = validate(
        spec_from_dict(
            {
                "arms": [
                    {"name": "x", "url": "http://127.0.0.1:9/v1"},
                    {"name": "y", "url": "http://127.0.0.1:8/v1"},
                ],
                "load": {"concurrency": 2, "generators": 2},
            },
            "t.toml",
        )
    )
    assert generator_names(spec) == [
        "abtui-gen-x-0",
        "abtui-gen-x-1",
        "abtui-gen-y-0",
        "abtui-gen-y-1",
    ]


def test_generators_never_launched_end_with_close():
    pre = Prestarted(["abtui-gen-a", "abtui-gen-b"])
    procs = list(pre.procs)
    assert len(procs) == 2 and all(p.is_alive() for p in procs)
    with pytest.raises(ValueError, match="1 plans for 2"):
        pre.launch([object()], [])
    t = time.monotonic()
    pre.close()
    assert time.monotonic() - t < 5
    assert all(not p.is_alive() for p in procs)
    pre.close()  # again: nothing left to do


def test_a_generator_whose_pipe_closes_exits_by_itself():
    """The main process gone (its end of the plan pipe closed): the generator exits, 0."""
    pre = Prestarted(["abtui-gen-a"])
    (p,) = pre.procs
    for conn in pre._plans:
        conn.close()
    p.join(timeout=60)
    assert p.exitcode == 0
    pre._plans = []
    pre.close()


def test_a_generator_that_died_before_its_plan_is_left_to_the_session():
    """Killed while it waited: the launch still hands the others their plans (here: nothing to
    send), and the session sees the dead one's exit code (it reaps silent generators)."""
    from abtui.client.target import Target
    from abtui.runner.generator import ArmPlan
    from abtui.runner.messages import Done, Ready

    def plan(arm: int) -> ArmPlan:
        target = Target(base_url="http://127.0.0.1:9/v1", model="m")
        return ArmPlan(arm, target, [], [], "closed", 1, segments=[])

    pre = Prestarted(["abtui-gen-a", "abtui-gen-b"])
    a, b = pre.procs
    a.kill()
    a.join(timeout=10)
    procs: list = []
    results, pipes, stop = pre.launch([plan(0), plan(1)], procs)
    assert procs == [a, b] and len(pipes) == 2
    assert a.exitcode == -9
    ready = results.get(timeout=60)
    assert (type(ready), ready.wid) == (Ready, 1)
    stop.set()  # before its t0: it ends
    done = results.get(timeout=60)
    assert (type(done), done.wid) == (Done, 1)
    b.join(timeout=60)
    assert b.exitcode == 0
