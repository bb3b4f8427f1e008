"""A hand-written endpoint on 127.0.0.1 for tests that need one the simulator cannot be (one
that lies, records, echoes or fails on purpose): an asyncio server in a thread of its own,
started and stopped by ``with``. A subclass answers each connection in ``_handle``."""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopbackServer:
    def __init__(self) -> None:
        self.port = 0
        self.server: asyncio.Server | None = None
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
