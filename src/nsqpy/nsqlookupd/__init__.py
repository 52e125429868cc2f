"""nsqlookupd: the discovery daemon.

``registry`` is the pure registration DB (time passed in), ``tcp`` the V1 protocol adapter and
``http_api`` the HTTP API, both seeing the daemon through ``context.LookupdContext``; ``app``
wires them. It imports ``protocol`` and ``_internal`` only.
"""
