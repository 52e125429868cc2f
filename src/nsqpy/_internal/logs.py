"""NSQ-style log lines: ``[nsqd] 2024/01/02 15:04:05.000000 INFO: message`` on stderr."""

from __future__ import annotations

import logging
import sys
import time
from typing import Final

#: NSQ's level names, by Python level.
_LEVEL_NAMES: Final = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "FATAL",
}

#: ``--log-level`` values (NSQ spelling) to Python levels.
LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "fatal": logging.CRITICAL,
}


def parse_level(text: str) -> str:
    """Validate a ``--log-level`` / ``PUT /config/log_level`` value; its lowercase name."""
    name = text.lower()
    if name not in LEVELS:
        raise ValueError(f"invalid log level '{text}' (debug, info, warn, error, fatal)")
    return name


class NsqFormatter(logging.Formatter):
    """Formats records the way NSQ's ``lg`` package does."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(record.created))
        micros = int(record.created % 1 * 1_000_000)
        level = _LEVEL_NAMES.get(record.levelno, record.levelname)
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return f"{self.prefix}{stamp}.{micros:06d} {level}: {text}"


def setup(logger_name: str, prefix: str, level: str) -> logging.Logger:
    """Send ``logger_name``'s records to stderr in NSQ's format at NSQ level ``level``."""
    logger = logging.getLogger(logger_name)
    for handler in list(logger.handlers):
        if getattr(handler, "_nsqpy", False):
            logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NsqFormatter(prefix))
    handler._nsqpy = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(LEVELS[level.lower()])
    logger.propagate = False
    return logger
