"""What abtui writes as JSON (a verdict, a summary, a diagnosis) made standard: JSON has no NaN
or Infinity, so a missing figure is ``null``; numpy's scalars become Python's."""

from __future__ import annotations

import math

import numpy as np


def json_ready(obj):
    """``obj`` with every non-finite float → None, numpy scalars → Python numbers and bools,
    tuples → lists, through nested dicts and lists (anything else as it is)."""
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    return obj
