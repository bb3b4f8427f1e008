"""Hardware knowledge shared by the simulator and the roofline/diagnosis views.

- :mod:`abtui.hardware.gpus`: the GPU spec table (peaks, bandwidth, memory, power).
- :mod:`abtui.hardware.models`: model configs, parameter counts, Hugging Face config loading.
- :mod:`abtui.hardware.roofline`: bytes, FLOPs and predicted step times (docs/methods.md §5).

Nothing is imported eagerly here.
"""
