"""nsqadmin: the web UI and JSON API over an NSQ cluster.

``cluster`` and ``upstream`` fan out to nsqlookupd and every nsqd, ``aggregate`` and
``producers`` shape their answers, ``sampler``/``history`` keep the charts' data, ``http_api``
serves the API and ``static/`` the UI, seeing the daemon (``app``) only through
``context.Admin``. It may import ``tools``, ``protocol`` and ``_internal``, not the daemons.
"""
