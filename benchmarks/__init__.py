"""Load generators and a runner for measuring an nsqd over the TCP protocol V2.

The tools speak the wire protocol over raw sockets, so they need no NSQ client library and can
measure any broker that listens on 127.0.0.1: nsqpy's nsqd, a Go nsqd, or the built-in sink.

- ``python -m benchmarks.bench_writer``: MPUB load, one process per connection.
- ``python -m benchmarks.bench_reader``: SUB/RDY/FIN load, one process per connection.
- ``python -m benchmarks.run``: starts a broker and runs the PUB, SUB and PUB+SUB scenarios.
- ``python -m benchmarks.sink``: a do-nothing V2 server that shows the generators' own ceiling.
"""
