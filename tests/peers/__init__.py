"""Real third-party NSQ clients (pynsq, gnsq, nsqjs) talking to ``python -m nsqpy.nsqd``."""
