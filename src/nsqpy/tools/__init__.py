"""The work behind NSQ's utilities (see nsqpy.cli): record splitting, rate limiting, JSON
filtering, stats aggregation, host selection. The command-line modules only parse options.

It may import ``client``, ``protocol`` and ``_internal``; ``cli`` and ``nsqadmin`` import it.
"""
