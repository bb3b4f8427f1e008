"""Local load generator processes started before their plans exist.

A spawned generator is a new interpreter that imports its modules (~0.1 s of CPU on the 2-core
dev VM) before it can send a request. Started as soon as the spec is known (the command line
does it right after reading the spec), they do that while the main process imports its own
modules, asks the endpoints, creates the session file and writes the workload; each then waits
for its plan (:class:`~abtui.runner.generator.ArmPlan`) on a pipe and runs as
:func:`~abtui.runner.generator.generator_main`. A generator that never gets a plan (the run
failed before it launched, or was stopped) reads the pipe's end and exits; it also dies with
the main process.

This module imports only :mod:`multiprocessing`: the command line starts the processes before
it loads the run's own modules.
"""

from __future__ import annotations

import multiprocessing as mp
import signal


def generator_names(spec) -> list[str]:
    """The process name of each of ``spec``'s local generators, in worker order (arm by arm,
    ``spec.load.generators`` each)."""
    n_gen = spec.load.generators
    return [
        f"abtui-gen-{a.name}" + (f"-{g}" if n_gen > 1 else "")
        for a in spec.arms
        for g in range(n_gen)
    ]


def local_generators(spec) -> bool:
    """Whether ``spec`` runs its generators as local processes (not Ray actors)."""
    return not spec.ray.address


class Prestarted:
    """Generator processes, one per name, started now and given their plans by :meth:`launch`.
    Its handles are those :func:`abtui.runner.launch.start_local` returns."""

    def __init__(self, names: list[str]) -> None:
        ctx = mp.get_context("spawn")
        self.names = list(names)
        self.results = ctx.Queue()
        self.stop = ctx.Event()
        self.procs: list = []
        self._plans: list = []  # the write end of each process's plan pipe
        self.start_pipes: list = []
        self.launched = False
        try:
            for name in self.names:
                plan_in, plan_out = ctx.Pipe(duplex=False)
                parent_end, child_end = ctx.Pipe()
                p = ctx.Process(
                    target=child_main,
                    args=(plan_in, self.results, child_end, self.stop),
                    name=name,
                    daemon=True,
                )
                p.start()
                plan_in.close()
                child_end.close()
                self.procs.append(p)
                self._plans.append(plan_out)
                self.start_pipes.append(parent_end)
        except BaseException:
            self.close()
            raise

    def launch(self, plans: list, procs: list):
        """Send each process its plan (in worker order) and add the processes to ``procs``;
        returns (result queue, start pipes, stop event)."""
        if len(plans) != len(self.procs) or self.launched:
            raise ValueError(f"{len(plans)} plans for {len(self.procs)} prestarted generators")
        self.launched = True
        procs.extend(self.procs)
        for conn, plan in zip(self._plans, plans, strict=True):
            try:
                conn.send(plan)
            except OSError:  # it died meanwhile: the session records its exit code
                pass
            conn.close()
        self._plans = []
        return self.results, self.start_pipes, self.stop

    def close(self) -> None:
        """Processes never given a plan are terminated (they have sent nothing); launched ones
        belong to the session, which stops them."""
        if self.launched:
            return
        for conn in self._plans:
            conn.close()
        self._plans = []
        for p in self.procs:  # nothing sent yet: no need to wait for their imports
            if p.is_alive():
                p.terminate()
            p.join(timeout=2)
        self.procs = []


def child_main(plans, results, start_conn, stop) -> None:
    """A prestarted process: its modules imported, then its plan awaited and run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # before the imports (generator.process_setup)
    from abtui.runner import generator

    generator.process_setup()
    generator.preload()
    try:
        plan = plans.recv()
    except (EOFError, OSError):  # the run ended before it launched its generators
        return
    plans.close()
    generator.generator_main(plan, results, start_conn, stop)
