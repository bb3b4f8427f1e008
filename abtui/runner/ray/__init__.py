"""Load generators as Ray actors on a cluster (``abtui run --ray``): docs/scale-out.md.

Nothing here is imported unless a session asks for Ray; :mod:`abtui.runner.ray.clocks` is plain
arithmetic and imports no Ray."""
