"""nsqd's adapters: TCP protocol V2, HTTP API, TLS, AUTH, nsqlookupd registration, statsd push.

This is the only layer of nsqd that awaits I/O on behalf of clients. The adapters see the
daemon through ``server.context.Daemon``, a narrow typed protocol, never the ``NSQD`` class
that builds them. They may import ``core``, ``storage``, ``observe``, ``nsqd.options``,
``nsqpy.protocol`` and ``nsqpy._internal``.
"""
