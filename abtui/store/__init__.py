"""The session file: one DuckDB database per session (docs/session-file.md).

:mod:`abtui.store.schema` holds the DDL and ``SCHEMA_VERSION``; :class:`abtui.store.writer.SessionWriter`
creates a session and appends batches that are durable at every flush;
:class:`abtui.store.reader.SessionReader` opens a session read-only, including one whose writer
crashed or is still running.
"""
