"""The simulated OpenAI-compatible endpoint (``abtui sim serve``).

- :mod:`abtui.sim.engine`: the timing model (:class:`~abtui.sim.engine.SimConfig`,
  :class:`~abtui.sim.engine.FixedDelayEngine`) and the deterministic generated text.
- :mod:`abtui.sim.batching`: the continuous-batching engine of ``--preset`` (live and offline
  ``simulate``), with :mod:`abtui.sim.presets` (the preset grammar), :mod:`abtui.sim.preset_cli`
  (its options) and :mod:`abtui.sim.predict` (``abtui sim predict``).
- :mod:`abtui.sim.server`: the asyncio HTTP/1.1 face (``start_server``, ``serve``).
- :mod:`abtui.sim.process`: :class:`~abtui.sim.process.SimProcess`, the sim as a child process.
- :mod:`abtui.sim.cli_args`: the command-line options shared by ``python -m abtui.sim`` and
  ``abtui sim serve``.

Nothing is imported eagerly here.
"""
