"""Command-line applications: they parse options and call the library.

NSQ's utilities (``to_nsq``, ``nsq_tail``, ``nsq_to_file``, ``nsq_to_http``, ``nsq_to_nsq``,
``nsq_stat``), the local cluster (``nsqpy-cluster``) and the Spark jobs' entry points. The top
layer: it may import every other nsqpy package, and none imports it.
"""
