"""What nsqd tells about itself: ``/stats``, Prometheus ``/metrics``, statsd, queue alerts.

Snapshots are built from counters the domain keeps as it works (nothing here scans a queue on
the hot path). It may import ``core``, ``nsqpy.protocol`` and ``nsqpy._internal``; the adapters
and ``app`` import it, never the other way round.
"""
