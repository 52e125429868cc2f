"""Reading a file descriptor (stdin) from asyncio, whatever it is: pipe, file, or terminal.

``loop.connect_read_pipe`` refuses regular files, so a daemon thread does the blocking reads
and hands chunks to the loop through a small bounded queue (which also pushes back on a fast
producer). Being a daemon thread it never holds up exit, even when blocked on a terminal.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Final

CHUNK_SIZE: Final = 1 << 16
_QUEUE_DEPTH: Final = 8
_EOF: Final = b""


Chunks = asyncio.Queue[bytes | OSError]


def _reader(fd: int, queue: Chunks, loop: asyncio.AbstractEventLoop) -> None:
    while True:
        item: bytes | OSError
        try:
            item = os.read(fd, CHUNK_SIZE)
        except OSError as err:
            item = err
        try:
            done: Future[None] = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
            done.result()  # wait for room: the loop sets the pace
        except (RuntimeError, asyncio.CancelledError):
            return  # the loop has gone away: nobody is reading any more
        if not isinstance(item, bytes) or item == _EOF:
            return


async def read_chunks(fd: int = 0) -> AsyncIterator[bytes]:
    """Yield chunks read from ``fd`` until end of file; an OSError from the read is raised."""
    queue: Chunks = asyncio.Queue(_QUEUE_DEPTH)
    loop = asyncio.get_running_loop()
    threading.Thread(target=_reader, args=(fd, queue, loop), name="stdin", daemon=True).start()
    while True:
        item = await queue.get()
        if isinstance(item, OSError):
            raise item
        if item == _EOF:
            return
        yield item
