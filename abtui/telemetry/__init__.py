"""Telemetry: what the GPUs and the servers were doing while abtui measured (docs/telemetry.md).

- :mod:`abtui.telemetry.promtext`: a Prometheus text-format parser.
- :mod:`abtui.telemetry.engines`: vLLM / SGLang / TGI / DCGM-exporter names → abtui's names.
- :mod:`abtui.telemetry.scraper`: per-arm ``/metrics`` scraping; counters → per-interval deltas.
- :mod:`abtui.telemetry.nvml`: local GPUs through NVML (``pynvml``), every field optional.
- :mod:`abtui.telemetry.sampler`: background threads that feed the session file.
- :mod:`abtui.telemetry.diagnosis`: per-arm phase breakdown and GPU summary of a stored session.

Nothing is imported eagerly here.
"""
