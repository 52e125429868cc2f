"""The nsqd daemon: wires the broker to its TCP and HTTP listeners and its timers.

``NSQD(opts)`` then ``await start()`` binds every listener (port 0 works: the bound
addresses are in ``tcp_address`` and ``http_address``); ``await stop()`` closes clients and
listeners. One event loop owns all state: no threads, no locks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import ssl
import time
from typing import TYPE_CHECKING, Final

from nsqpy._internal.listen import ListenError, bound_port, format_address, serve_http
from nsqpy._version import __version__
from nsqpy.nsqd.core import auth
from nsqpy.nsqd.core.broker import Broker, BrokerConfig
from nsqpy.nsqd.core.topic import Topic
from nsqpy.nsqd.observe import alerts, stats
from nsqpy.nsqd.server import auth_query
from nsqpy.nsqd.server import tls as nsqd_tls
from nsqpy.nsqd.server.context import Connection
from nsqpy.nsqd.server.lookup import Lookup, identity
from nsqpy.nsqd.server.read_batching import ReadBatcher
from nsqpy.nsqd.server.tcp import V2Connection
from nsqpy.nsqd.storage import lease_journal, metadata
from nsqpy.nsqd.storage.diskqueue import DiskQueue
from nsqpy.nsqd.storage.persistence import DiskStore, MetadataWriter
from nsqpy.protocol.constants import NSQ_VERSION
from nsqpy.protocol.identify import ServerLimits

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

    from nsqpy.nsqd.core.redrive import Redrive
    from nsqpy.nsqd.options import NsqdOptions
    from nsqpy.nsqd.server.statsd_push import StatsdPusher

log = logging.getLogger("nsqpy.nsqd")

#: nsqd's QueueScanInterval: how often in-flight and deferred timeouts are checked.
QUEUE_SCAN_INTERVAL: Final = 0.1
#: Seconds clients get at shutdown to read what was already sent before they are cut off.
SHUTDOWN_GRACE: Final = 2.0
_MS: Final = 1_000_000


class StartupError(Exception):
    """nsqd cannot start with these options; the message says why."""


def _split_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` (``[v6]:port``, ``:port``) or None when it is not one (a unix path)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "0.0.0.0", int(port)


class NSQD:
    """One nsqd process's worth of broker, listeners and timers."""

    def __init__(self, opts: NsqdOptions) -> None:
        self.opts = opts
        self.loop = asyncio.get_running_loop()
        self.data_path = opts.data_path or os.getcwd()
        self.store = DiskStore(
            self.loop,
            self.data_path,
            max_bytes_per_file=opts.max_bytes_per_file,
            max_msg_size=opts.max_msg_size,
            sync_every=opts.sync_every,
            sync_timeout=opts.sync_timeout / 1e9,
            durable=opts.durable,
            set_health=self._set_health,
            commit_linger=opts.commit_linger / 1e9,
        )
        self.broker = Broker(
            BrokerConfig(
                node_id=opts.node_id,
                mem_queue_size=opts.mem_queue_size,
                max_msg_timeout=opts.max_msg_timeout / 1e9,
                max_channel_consumers=opts.max_channel_consumers,
                policy=opts.policy_defaults,
            ),
            backends=self.store.open_queue,
            hooks=self.store,
        )
        #: nsqd.dat, written on a thread of its own (creating a topic never waits for it)
        self.meta_writer = MetadataWriter(self.loop, self.data_path, self._metadata_bytes)
        self.store.metadata = self.meta_writer
        self.broker.listeners.append(self._on_change)
        self.broker.on_dead_letters = self._schedule_dead_letters
        self._redrive_locks: dict[str, asyncio.Lock] = {}
        self._redrives_running: set[asyncio.Task[Redrive | None]] = set()
        if opts.e2e_processing_latency_percentiles:
            self.broker.listeners.append(self._track_e2e)
        self._statsd: StatsdPusher | None = None
        self._lock = metadata.DataPathLock(self.data_path)
        self._tasks: set[asyncio.Task[None]] = set()
        self.lookup: Lookup | None = None
        self._restoring = False
        #: --durable: the journal that keeps sealed leases across a restart (opened by start)
        self.leases: lease_journal.LeaseJournal | None = None
        self._pump_scheduled = False
        self.tls_context: ssl.SSLContext | None = None  # built by start()
        self.auth_tls_context: ssl.SSLContext | None = None
        self.auth_enabled = bool(opts.auth_http_addresses)
        self._auth_session: aiohttp.ClientSession | None = None
        self.limits = ServerLimits(
            max_heartbeat_interval=opts.max_heartbeat_interval // _MS,
            max_output_buffer_size=opts.max_output_buffer_size,
            min_output_buffer_timeout=opts.min_output_buffer_timeout // _MS,
            max_output_buffer_timeout=opts.max_output_buffer_timeout // _MS,
            max_msg_timeout=opts.max_msg_timeout // _MS,
            max_rdy_count=opts.max_rdy_count,
            max_deflate_level=opts.max_deflate_level,
            compression_available=True,
            snappy_enabled=opts.snappy,
            deflate_enabled=opts.deflate,
            auth_required=bool(opts.auth_http_addresses),
            leases_available=True,
        )
        self.clients: dict[int, Connection] = {}
        self.read_batcher = ReadBatcher(self.loop)
        self.start_time = int(time.time())
        self.tcp_address = ""
        self.http_address = ""
        self.https_address = ""
        self.tcp_port = 0
        self.http_port = 0
        self.https_port = 0
        self.health = "OK"
        self._client_ids = itertools.count(1)
        self._dirty: list[Connection] = []
        self._flush_scheduled = False
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http_runner: web.AppRunner | None = None
        self._https_runner: web.AppRunner | None = None
        self._scan_timer: asyncio.TimerHandle | None = None
        #: Backlog alerts; the rules are parsed by check_options (none until then).
        self.alerts = alerts.AlertMonitor(alerts.AlertRules())
        self._alert_timer: asyncio.TimerHandle | None = None
        self._stopping: asyncio.Future[None] | None = None
        self._stopped = asyncio.Event()
        self._all_clients_gone = asyncio.Event()

    def next_client_id(self) -> int:
        return next(self._client_ids)

    def client_arrived(self, client_id: int, conn: Connection) -> None:
        self.clients[client_id] = conn
        self._all_clients_gone.clear()

    def client_gone(self, client_id: int) -> None:
        self.clients.pop(client_id, None)
        if not self.clients:
            self._all_clients_gone.set()

    # -- output coalescing -----------------------------------------------------------------
    def schedule_flush(self, conn: Connection) -> None:
        """Flush ``conn`` at the next loop iteration, together with every other dirty one."""
        conn.flush_pending = True
        self._dirty.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_all)

    def _flush_all(self) -> None:
        self.store.poll_commits()  # OKs whose fsync ended meanwhile go out in this flush
        self._flush_scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            if conn.flush_pending:
                conn.flush()

    # -- lifecycle --------------------------------------------------------------------------
    def check_options(self) -> None:
        """Refuse contradictory options."""
        opts = self.opts
        if opts.http_auth_required and not opts.auth_http_addresses:
            raise StartupError("--http-auth-required needs --auth-http-address")
        if opts.statsd_address and opts.statsd_interval <= 0:
            # nsqd panics here (a Go ticker needs a positive period); say why instead
            raise StartupError("--statsd-interval must be positive")
        try:
            rules = alerts.AlertRules.parse(opts.alert_depths, opts.alert_ages)
        except ValueError as err:
            raise StartupError(f"invalid alert rule - {err}") from err
        self.alerts = alerts.AlertMonitor(rules)

    def _build_tls(self) -> None:
        opts = self.opts
        try:
            self.tls_context = nsqd_tls.server_context(opts)
        except nsqd_tls.TLSConfigError as err:
            raise StartupError(f"failed to build TLS config - {err}") from err
        if opts.auth_http_addresses:  # the system CAs take ~15 ms to load: only when needed
            try:
                self.auth_tls_context = nsqd_tls.client_context(opts)
            except nsqd_tls.TLSConfigError as err:
                raise StartupError(f"failed to build client TLS config - {err}") from err
        self.limits = dataclasses.replace(self.limits, tls_available=self.tls_context is not None)

    async def start(self) -> None:
        self.check_options()
        self._build_tls()
        log.info("nsqd v%s (built w/nsqpy-%s)", NSQ_VERSION, __version__)
        log.info("ID: %d", self.opts.node_id)
        os.makedirs(self.data_path, exist_ok=True)
        try:
            self._lock.acquire()
        except metadata.MetadataError as err:
            raise StartupError(str(err)) from err
        self._restore()
        if self.opts.durable:
            self.leases = lease_journal.open_journal(
                self.store.open_queue, self.store, self.broker, self.loop.time()
            )
        self.store.start()
        await self._start_tcp()
        await self._start_http()
        await self._start_https()
        self._start_lookup()
        self._scan_timer = self.loop.call_later(QUEUE_SCAN_INTERVAL, self._queue_scan)
        self._schedule_pump()
        self._start_statsd()
        if self.alerts.enabled:
            self._alert_timer = self.loop.call_later(self._alert_interval, self._check_alerts)

    def _start_lookup(self) -> None:
        opts = self.opts
        self.lookup = Lookup(
            identity(
                opts.broadcast_address,
                opts.broadcast_tcp_port or self.tcp_port,
                opts.broadcast_http_port or self.http_port,
            ),
            self._registrations,
            http_timeout=(opts.http_client_connect_timeout + opts.http_client_request_timeout)
            / 1e9,
        )
        self.lookup.set_addresses(list(opts.nsqlookupd_tcp_addresses))

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """``PUT /config/nsqlookupd_tcp_addresses``: takes effect at once."""
        self.opts.nsqlookupd_tcp_addresses = addresses
        if self.lookup is not None:
            self.lookup.set_addresses(addresses)

    def _registrations(self) -> list[tuple[str, str]]:
        regs: list[tuple[str, str]] = []
        for topic in self.broker.topics.values():
            if topic.channels:
                regs.extend((topic.name, name) for name in topic.channels)
            else:
                regs.append((topic.name, ""))
        return regs

    def _restore(self) -> None:
        path = os.path.join(self.data_path, metadata.FILE_NAME)
        log.info("NSQ: persisting topic/channel metadata to %s", path)
        self._restoring = True
        try:
            self.broker.restore(metadata.load(self.data_path), self.loop.time())
        finally:
            self._restoring = False
        try:  # at once: nothing else runs yet
            metadata.write_file(self.data_path, self._metadata_bytes())
        except metadata.MetadataError as err:
            log.error("%s", err)

    # -- metadata and backlog ------------------------------------------------------------
    def _on_change(self, event: str, topic: str, channel: str) -> None:
        if self._restoring:
            return  # after a restart the lookup connections register everything anyway
        self.meta_writer.request(topic)
        if self.lookup is not None:
            self.lookup.notify(event, topic, channel)
            if event == "topic_created" and self.lookup.peers:
                self._precreate_channels(topic)
        if event == "channel_created":
            self._schedule_pump()

    def _precreate_channels(self, name: str) -> None:
        """Ask lookupd which channels ``name`` has in the cluster; hold messages meanwhile."""
        topic = self.broker.topics[name]
        topic.awaiting_channels = True
        task = self.loop.create_task(self._create_known_channels(topic))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create_known_channels(self, topic: Topic) -> None:
        try:
            assert self.lookup is not None
            for channel in await self.lookup.channels_for(topic.name):
                if self.broker.topics.get(topic.name) is topic:
                    self.broker.get_channel(topic, channel, self.loop.time())
        finally:
            topic.channels_known(self.loop.time())
            self._schedule_pump()

    def _metadata_bytes(self) -> bytes:
        return metadata.encode(self.broker.metadata())

    def persist_metadata(self) -> None:
        """A paused flag or a setting changed: write nsqd.dat (off the loop, soon)."""
        self.meta_writer.request()
        self._schedule_pump()  # an unpause may have released a topic's disk backlog

    def metadata_pending(self, topic: str) -> bool:
        """Whether ``topic`` or one of its channels is not yet written to nsqd.dat."""
        return self.meta_writer.pending_for(topic)

    async def metadata_written(self) -> bool:
        """Wait until nsqd.dat holds every change made so far (False if its write failed)."""
        return await self.meta_writer.written()

    def _schedule_pump(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self.loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Move topics' disk backlogs to their channels, a batch per topic per iteration."""
        self._pump_scheduled = False
        now = self.loop.time()
        more = False
        for topic in list(self.broker.topics.values()):
            if topic.pump(now):
                more = True
        if more:
            self._schedule_pump()

    # -- dead letters -----------------------------------------------------------------------
    def _schedule_dead_letters(self) -> None:
        self.loop.call_soon(self._flush_dead_letters)

    def _flush_dead_letters(self) -> None:
        try:
            self.broker.flush_dead_letters(self.loop.time(), time.time_ns())
        finally:
            self._schedule_pump()

    async def committed(self) -> bool:
        """Durable mode: wait for the group commit covering every write so far (True if it
        succeeded); at once otherwise."""
        if not self.store.durable:
            return True
        done: asyncio.Future[bool] = self.loop.create_future()

        def commit(ok: bool) -> None:
            if not done.done():  # the waiter may have been cancelled meanwhile
                done.set_result(ok)

        self.store.after_commit(commit)
        return await done

    async def redrive(self, topic_name: str, origin: str | None = None) -> Redrive | None:
        """Move the dead letters of ``topic_name`` back to their channels (only those of
        ``origin``, ``"topic:channel"``, if given); None when there is no such topic.

        One redrive of a topic runs at a time; each batch is a loop iteration of its own. It
        runs as a task of its own, so a caller that gives up (an HTTP client timing out on a
        large backlog) does not stop it half-way. In durable mode it returns once the moves
        are committed. Raises BrokerError when a disk write fails and OSError when the commit
        does.
        """
        task = self.loop.create_task(self._redrive(topic_name, origin))
        self._redrives_running.add(task)
        task.add_done_callback(self._redrives_running.discard)
        return await asyncio.shield(task)

    async def _redrive(self, topic_name: str, origin: str | None) -> Redrive | None:
        lock = self._redrive_locks.setdefault(topic_name, asyncio.Lock())
        async with lock:
            topic = self.broker.topics.get(topic_name)
            if topic is None:
                return None
            from nsqpy.nsqd.core.redrive import Redrive

            job = Redrive(self.broker, topic, origin)
            for _ in itertools.count():
                if not job.step(self.loop.time(), time.time_ns()):
                    break
                await asyncio.sleep(0)  # clients and other requests run between batches
            if not await self.committed():
                raise OSError("sync failed")
            return job

    def _set_health(self, health: str) -> None:
        if health != self.health:
            if health != "OK":
                log.error("health: %s", health)
            self.health = health

    # -- end-to-end latency and statsd --------------------------------------------------------
    def _track_e2e(self, event: str, topic: str, channel: str) -> None:
        """Every channel records FIN latencies when percentiles are configured (a listener,
        so it also covers channels restored from nsqd.dat)."""
        owner = self.broker.topics.get(topic) if event == "channel_created" else None
        created = owner.channels.get(channel) if owner is not None else None
        if created is not None:
            opts = self.opts
            created.track_e2e(
                opts.e2e_processing_latency_window_time, opts.e2e_processing_latency_percentiles
            )

    def _start_statsd(self) -> None:
        opts = self.opts
        if opts.statsd_address:
            from nsqpy.nsqd.server.statsd_push import StatsdPusher  # imported only when configured

            self._statsd = StatsdPusher(
                opts,
                _split_host_port(opts.statsd_address),
                self.http_port,
                lambda: stats.collect(self.broker.topics, self.clients, include_clients=False),
            )
            self._statsd.start()

    async def _start_tcp(self) -> None:
        address = self.opts.tcp_address
        hostport = _split_host_port(address)
        try:
            if hostport is None:
                server = await self.loop.create_unix_server(lambda: V2Connection(self), address)
            else:
                server = await self.loop.create_server(
                    lambda: V2Connection(self), hostport[0], hostport[1], reuse_address=True
                )
        except OSError as err:
            raise StartupError(f"listen ({address}) failed - {err}") from err
        self._tcp_server = server
        sockname = server.sockets[0].getsockname()
        self.tcp_address = format_address(sockname)
        self.tcp_port = bound_port(sockname)
        log.info("TCP: listening on %s", self.tcp_address)

    async def _start_http(self) -> None:
        address = self.opts.http_address
        if not address:
            return
        self._http_runner, sockname = await self._serve_http(address, None, "HTTP")
        self.http_address = format_address(sockname)
        self.http_port = bound_port(sockname)
        log.info("HTTP: listening on %s", self.http_address)

    async def _start_https(self) -> None:
        """nsqd listens for HTTPS only when a certificate and key are configured."""
        address = self.opts.https_address
        if not address or self.tls_context is None:
            return
        self._https_runner, sockname = await self._serve_http(address, self.tls_context, "HTTPS")
        self.https_address = format_address(sockname)
        self.https_port = bound_port(sockname)
        log.info("HTTPS: listening on %s", self.https_address)

    async def _serve_http(
        self, address: str, context: ssl.SSLContext | None, name: str
    ) -> tuple[web.AppRunner, object]:
        from nsqpy.nsqd.server.http_api import make_app

        app = make_app(self, tls=context is not None)
        try:
            return await serve_http(
                app, address, shutdown_timeout=SHUTDOWN_GRACE, ssl_context=context, unix=True
            )
        except ListenError as err:
            raise StartupError(str(err)) from err

    # -- auth server ----------------------------------------------------------------------------
    async def query_auth(
        self, *, remote_ip: str, tls: bool, common_name: str, secret: str
    ) -> auth.AuthState:
        """Ask the ``--auth-http-address`` servers (raises ``auth.AuthServerError``)."""
        if self._auth_session is None or self._auth_session.closed:
            opts = self.opts
            import aiohttp  # the client (imported before serving: __main__)

            self._auth_session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=(opts.http_client_connect_timeout + opts.http_client_request_timeout)
                    / 1e9,
                    connect=opts.http_client_connect_timeout / 1e9,
                )
            )
        return await auth_query.query_any(
            self._auth_session,
            list(self.opts.auth_http_addresses),
            remote_ip=remote_ip,
            tls=tls,
            common_name=common_name,
            secret=secret,
            ssl_context=self.auth_tls_context,
            clock=self.loop.time,
        )

    def _queue_scan(self) -> None:
        self.broker.process_timeouts(self.loop.time())
        self._scan_timer = self.loop.call_later(QUEUE_SCAN_INTERVAL, self._queue_scan)

    @property
    def _alert_interval(self) -> float:
        return self.opts.alert_check_interval / 1e9

    def _check_alerts(self) -> None:
        """Compare every queue with its thresholds (the monitor logs each crossing)."""
        monitor = self.alerts
        monitor.check(time.time_ns(), alerts.probe(self.broker.topics, monitor.rules))
        self._alert_timer = self.loop.call_later(self._alert_interval, self._check_alerts)

    def disconnect(self, client_ids: list[int]) -> None:
        for client_id in client_ids:
            conn = self.clients.get(client_id)
            if conn is not None:
                conn.close()

    async def stop(self) -> None:
        """Stop accepting, close every client, stop HTTP; safe to call more than once.

        Clients get ``SHUTDOWN_GRACE`` seconds to take what is already written to them; a peer
        that is not reading is then cut off, so shutdown never hangs on a stuck consumer.
        """
        if self._stopping is not None:
            await asyncio.shield(self._stopping)
            return
        self._stopping = self.loop.create_future()
        try:
            await self._shutdown()
        finally:
            self._stopping.set_result(None)
            self._stopped.set()
            log.info("NSQ: bye")

    async def _shutdown(self) -> None:
        for redrive in list(self._redrives_running):
            redrive.cancel()  # between two batches: what moved is moved, the rest stays
        if self._scan_timer is not None:
            self._scan_timer.cancel()
        if self._alert_timer is not None:
            self._alert_timer.cancel()
        self.read_batcher.close()
        if self._statsd is not None:
            await self._statsd.stop()
        if self.lookup is not None:
            await self.lookup.stop()
        if self._tcp_server is not None:
            self._tcp_server.close()
        for conn in list(self.clients.values()):
            conn.close()
        for runner in (self._http_runner, self._https_runner):
            if runner is not None:
                await runner.cleanup()
        if self.clients:
            try:
                async with asyncio.timeout(SHUTDOWN_GRACE):
                    await self._all_clients_gone.wait()
            except TimeoutError:
                pass
        now = self.loop.time()
        for conn in list(self.clients.values()):
            conn.abort()
            self.broker.remove_client(conn.state, now)  # its messages go back before the flush
        await asyncio.sleep(0)  # let aborted connections run connection_lost
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()
        if self._auth_session is not None:
            await self._auth_session.close()
        await self._persist_everything()

    async def _persist_everything(self) -> None:
        """Clean shutdown: nsqd.dat, then every memory, in-flight and deferred message to disk,
        then nsqd.dat again with the deferred records' counts when there are any."""
        if not self._lock.held:
            return  # never started: nothing of ours is on disk
        now = self.loop.time()
        self.broker.flush_dead_letters(now, time.time_ns())  # diverted in this iteration
        await self.meta_writer.close()
        written = 0
        for topic in self.broker.topics.values():
            for channel in topic.channels.values():
                written += channel.flush(now)
            written += topic.flush()
        queues = [q for q in self.broker.backends_in_use() if isinstance(q, DiskQueue)]
        if self.leases is not None:
            queues.append(self.leases.queue)
        await self.store.close(queues)
        log.info("NSQ: messages written to disk: %d, queues closed: %d", written, len(queues))
        if any(channel.disk_deferred for channel in self.broker.channels()):
            # only once the records are on disk: a count must never promise what is not there
            await self.meta_writer.close(
                lambda: metadata.encode(self.broker.metadata(deferred=True))
            )
        self._lock.release()

    async def wait_stopped(self) -> None:
        """Return once ``stop`` has completed (e.g. after a signal)."""
        await self._stopped.wait()
