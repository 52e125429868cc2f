"""Errors a V2 command can produce, as sent on the wire.

nsqd answers a bad command with an error frame whose body is ``CODE + " " + description``.
Only E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED leave the connection open; every other
error is fatal (the frame is sent, then the connection is closed).
"""

from typing import Final

NON_FATAL_CODES: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})


class ClientError(Exception):
    """A command failed; ``wire`` is the exact error frame body."""

    __slots__ = ("code", "desc", "fatal")

    def __init__(self, code: str, desc: str, *, fatal: bool | None = None) -> None:
        super().__init__(f"{code} {desc}")
        self.code = code
        self.desc = desc
        self.fatal = code not in NON_FATAL_CODES if fatal is None else fatal

    @property
    def wire(self) -> bytes:
        return f"{self.code} {self.desc}".encode("utf-8", "surrogateescape")


class SilentClose(Exception):
    """The connection must be closed without an error frame (nsqd's read errors)."""
