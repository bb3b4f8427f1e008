"""Where an arm's load generators run: local spawned processes (the default) or Ray actors on a
cluster (``--ray``, :mod:`abtui.runner.ray`, imported only then).

Both give :func:`abtui.runner.session.run_session` the same handles: a result queue, one start
pipe per generator, a stop event, and process handles (``is_alive``, ``terminate``, ``join``).
"""

from __future__ import annotations

import multiprocessing as mp

from abtui.runner.generator import ArmPlan, generator_main
from abtui.spec import Spec
from abtui.store.writer import SessionWriter


def start_local(spec: Spec, plans: list[ArmPlan], procs: list, prestarted=None):
    """One spawned process per generator; returns (result queue, start pipes, stop event).
    ``prestarted``: a :class:`~abtui.runner.prestart.Prestarted` with as many processes as
    ``plans``, given their plans instead of new ones started."""
    if prestarted is not None and len(prestarted.names) == len(plans):
        return prestarted.launch(plans, procs)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    stop = ctx.Event()
    pipes = []
    n_gen = spec.load.generators
    for plan in plans:
        parent_end, child_end = ctx.Pipe()
        g = plan.wid % n_gen
        p = ctx.Process(
            target=generator_main,
            args=(plan, results, child_end, stop),
            name=f"abtui-gen-{spec.arms[plan.arm].name}" + (f"-{g}" if n_gen > 1 else ""),
            daemon=True,
        )
        p.start()
        procs.append(p)
        pipes.append(parent_end)
    return results, pipes, stop


def start_fleet(spec: Spec, plans: list[ArmPlan], writer: SessionWriter, obs):
    """The generators as Ray actors (imported only here: no --ray, no Ray)."""
    from abtui.runner.ray.fleet import RayFleet

    r = spec.ray
    fleet = RayFleet(
        r.address,
        plans,
        [a.name for a in spec.arms],
        placement=r.placement,
        cpus_per_generator=r.cpus_per_generator,
        clock_warn_ms=r.clock_warn_ms,
        n_gen=spec.load.generators,
    )
    try:
        fleet.handles = fleet.start()
    except BaseException:
        fleet.close()
        raise
    writer.write_meta(ray=fleet.meta())
    nodes = {n["node_id"] for n in fleet.nodes}
    obs.message(
        f"ray: {len(plans)} generator actors on {len(nodes)} node(s), {r.placement} "
        f"placement, started in {fleet.t_start_s:.1f} s"
    )
    for kind, text in fleet.clock_warnings():
        writer.event(kind, text)
        obs.message(f"warning {kind}: {text}")
    return fleet
