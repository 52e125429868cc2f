"""nsqd's disk: segment-file queues, syncing and group commit, and ``nsqd.dat``.

``diskqueue`` is the append-only queue, ``persistence`` the daemon's ``DiskHooks`` (fsync on a
worker thread, group commit in durable mode), ``metadata`` the topic/channel list and the
data-path lock. It implements the storage interface of ``nsqd.core`` and may import ``core``,
``nsqpy.protocol`` and ``nsqpy._internal``; never the adapters or observability.
"""
