"""The pipeline jobs behind ``nsqpy-archive``, ``nsqpy-replay`` and ``nsqpy-report``.

Each job is a function taking a SparkSession and a config dataclass, so the command lines stay
thin (parse, build a session, call) and tests drive the same code in-process on one session.
"""
