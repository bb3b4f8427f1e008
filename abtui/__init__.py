"""abtui: is the candidate inference deployment better than the baseline, for our traffic?

Kept free of eager imports so that importing a core module never drags in the UI.
"""

__version__ = "0.1.0"
