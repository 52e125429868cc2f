"""``with`` / ``async with`` support for the client's resources: leaving the block closes them.

Entering stays each class's own (a Consumer starts, a Producer connects); only the exit is
shared.
"""

from __future__ import annotations

from types import TracebackType


class Closing:
    """``with`` support: leaving the block calls ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """``async with`` support: leaving the block awaits ``close()``."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
