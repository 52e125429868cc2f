"""The one error type a job raises for things the user can fix, and Spark failures in brief."""

from __future__ import annotations

import re
from typing import Final

#: The exception line of a Python (or Java) traceback embedded in Spark's message.
_EXCEPTION_LINE: Final = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception)\b[^:\n]*: .+$", re.M)


class JobError(Exception):
    """A job cannot run or failed for a reason worth one line on stderr, not a traceback."""


class NothingSelected(JobError):
    """The job ran, but its selection (topics, time range) matched no archived message."""


def spark_failure(what: str, exc: BaseException) -> JobError:
    """A JobError naming the root cause of a Spark failure.

    Spark's first line is only ``[STREAM_FAILED] Query [id = ...] terminated with exception:
    ... Traceback``; the useful line (``ValueError: nsq: unknown option ...``) is the first
    exception line of the traceback that follows.
    """
    text = str(exc)
    cause = _EXCEPTION_LINE.search(text)
    if cause is not None:
        return JobError(f"{what}: {cause.group(0).strip()}")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return JobError(f"{what}: {first}")
