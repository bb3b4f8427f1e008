"""A real inference engine for abtui to be checked against (issue 3, `abtui[engine]`).

llama.cpp's OpenAI-compatible server through ``llama-cpp-python``, serving a tiny Llama GGUF
that :mod:`abtui.engine.tinymodel` writes with seeded random weights. Nothing here is imported
by the rest of abtui; ``gguf`` and ``llama_cpp`` are imported lazily, only when used.
"""
