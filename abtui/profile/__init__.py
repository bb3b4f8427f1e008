"""Profiles of an inference server: where its time goes, operator class by operator class,
phase by phase, and what an optimisation of some classes can gain at most (Amdahl).

The readers turn a profiler's file into a :class:`~abtui.profile.model.Trace`: PyTorch
profiler / Kineto Chrome-trace JSON (:mod:`.chrome`, what vLLM and SGLang write), Nsight
Systems' SQLite export and ``cuda_gpu_kern_sum`` CSV (:mod:`.nsys`), Nsight Compute's CSV
(:mod:`.ncu`); :func:`~abtui.profile.read.read_trace` picks the reader from the file.
:mod:`.classes` sorts every operator or kernel into a class by its name, :mod:`.phases` finds
the steps (prefill, decode) in the trace's annotations, :mod:`.analyse` sums each class's time
per phase and compares two profiles, :mod:`.amdahl` bounds an optimisation's speed-up, and
:mod:`.render` writes it all as plain text or JSON. docs/profile.md says what each figure is.

Names in a trace are text from outside: the renderers keep them as they are, and whoever
prints the text passes it through :func:`abtui.report.untrusted.inert`.
"""
