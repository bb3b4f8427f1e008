"""Renderings of a session: headless console summary (Markdown/HTML/JSON later)."""
