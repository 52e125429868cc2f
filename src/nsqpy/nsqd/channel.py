"""A channel: a copy of every message of its topic, spread over its subscribed clients.

Theory of operation
-------------------
Delivery is push. ``put`` hands a message straight to a ready client (RDY window open,
transport writable) or, if none is, appends it to the memory queue. When a client's window
opens (RDY, FIN, REQ, a timeout, its transport draining) ``client_ready`` first pours the
queue into it and then lists it in ``_ready``, a deque rotated per delivery so that
messages spread round-robin. Entries in ``_ready`` are checked lazily: a client whose window
closed is dropped when it reaches the front.

In-flight messages live in their client's ordered dict; deferred ones in a heap by due time.
``process(now)`` expires both; the daemon calls it on a short tick with the loop's clock,
tests call it with any clock they like.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from itertools import count

from nsqpy.nsqd.client import STATE_CLOSING, ClientState
from nsqpy.nsqd.errors import Exiting, InFlightError, TooManyConsumers
from nsqpy.nsqd.message import Message
from nsqpy.protocol.names import is_ephemeral


class Channel:
    """Queue, in-flight and deferred bookkeeping for one channel of one topic."""

    def __init__(
        self,
        topic_name: str,
        name: str,
        *,
        mem_queue_size: int,
        max_msg_timeout: float,
        max_consumers: int = 0,
    ) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.mem_queue_size = mem_queue_size
        self.max_msg_timeout = max_msg_timeout
        self.max_consumers = max_consumers
        self.queue: deque[Message] = deque()
        self.clients: dict[int, ClientState] = {}
        self.paused = False
        self.exiting = False
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.in_flight_count = 0
        self._ready: deque[ClientState] = deque()
        self._deferred: list[tuple[float, int, Message]] = []
        self._seq = count()

    # -- stats -------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def deferred_count(self) -> int:
        return len(self._deferred)

    # -- putting messages in -----------------------------------------------------------
    def room(self) -> int:
        """How many more messages the channel can take now without dropping any."""
        room = self.mem_queue_size - len(self.queue)
        if not self.queue and not self.paused:
            room += sum(max(c.rdy - len(c.in_flight), 0) for c in self.clients.values())
        return room

    def put(self, msg: Message, now: float) -> None:
        self.message_count += 1
        self._put(msg, now)

    def put_many(self, msgs: list[Message], now: float) -> None:
        """``put`` for a batch: the publish hot path, with delivery inlined."""
        self.message_count += len(msgs)
        ready = self._ready
        count = len(msgs)
        i = 0
        while i < count and ready and not self.paused:
            client = ready[0]
            if client.rdy <= len(client.in_flight) or not client.writable:
                ready.popleft()
                client.in_ready = False
                continue
            if client.sample_rate:
                self._send(client, msgs[i], now)
            else:  # _send inlined: this runs once per published message
                msg = msgs[i]
                msg.attempts += 1
                msg.client = client
                msg.delivery_ts = now
                msg.deadline = now + client.msg_timeout
                client.in_flight[msg.id] = msg
                client.message_count += 1
                self.in_flight_count += 1
                client.write_message(msg)
            i += 1
            ready.rotate(-1)
        if i < count:
            rest = msgs[i:] if i else msgs
            if self.ephemeral:
                for msg in rest:
                    self._put(msg, now)  # keeps the ephemeral memory bound
            else:
                self.queue.extend(rest)

    def put_deferred(self, msg: Message, due: float) -> None:
        self.message_count += 1
        heapq.heappush(self._deferred, (due, next(self._seq), msg))

    def _put(self, msg: Message, now: float) -> None:
        ready = self._ready
        while ready and not self.paused:
            client = ready[0]
            if client.rdy > len(client.in_flight) and client.writable:
                self._send(client, msg, now)
                ready.rotate(-1)
                return
            ready.popleft()
            client.in_ready = False
        if self.ephemeral and len(self.queue) >= self.mem_queue_size:
            return  # nsqd drops what does not fit in an ephemeral channel's memory
        self.queue.append(msg)

    def _send(self, client: ClientState, msg: Message, now: float) -> None:
        # put_many and client_ready inline this body on their hot paths: change all three.
        if client.sample_rate and random.randrange(100) > client.sample_rate:
            return  # sampled out: taken off the queue and dropped, as nsqd does
        msg.attempts += 1
        msg.client = client
        msg.delivery_ts = now
        msg.deadline = now + client.msg_timeout
        client.in_flight[msg.id] = msg
        client.message_count += 1
        self.in_flight_count += 1
        client.write_message(msg)

    # -- clients -----------------------------------------------------------------------
    def add_client(self, client: ClientState) -> None:
        if self.exiting:
            raise Exiting()
        if self.max_consumers and len(self.clients) >= self.max_consumers:
            raise TooManyConsumers(
                f"consumers for {self.topic_name}:{self.name} exceeds limit of {self.max_consumers}"
            )
        self.clients[client.id] = client
        client.channel = self

    def remove_client(self, client: ClientState, now: float) -> bool:
        """Drop a client, requeueing its in-flight messages at once.

        nsqd leaves them to time out (up to --msg-timeout later); nsqpy puts them back now and
        counts them as timeouts. Returns True when an ephemeral channel lost its last client.
        """
        if self.clients.pop(client.id, None) is None:
            return False
        client.rdy = 0
        stranded = list(client.in_flight.values())
        client.in_flight.clear()
        client.capped.clear()
        self.in_flight_count -= len(stranded)
        self.timeout_count += len(stranded)
        for msg in stranded:
            msg.client = None
            self._put(msg, now)
        return self.ephemeral and not self.clients

    def client_ready(self, client: ClientState, now: float) -> None:
        """The client's window may have opened: pour queued messages in, then list it."""
        if self.paused or not client.writable or client.id not in self.clients:
            return
        queue = self.queue
        in_flight = client.in_flight
        timeout = client.msg_timeout
        write = client.write_message
        # write may fill the transport and clear client.writable mid-way.
        while queue and client.rdy > len(in_flight) and client.writable:
            if client.sample_rate:
                self._send(client, queue.popleft(), now)
                continue
            msg = queue.popleft()  # _send inlined: once per delivered message
            msg.attempts += 1
            msg.client = client
            msg.delivery_ts = now
            msg.deadline = now + timeout
            in_flight[msg.id] = msg
            client.message_count += 1
            self.in_flight_count += 1
            write(msg)
        if not client.in_ready and client.rdy > len(client.in_flight):
            client.in_ready = True
            self._ready.append(client)

    def set_rdy(self, client: ClientState, count: int, now: float) -> None:
        if client.state == STATE_CLOSING:
            return
        client.rdy = count
        self.client_ready(client, now)

    # -- FIN / REQ / TOUCH --------------------------------------------------------------
    def _take(self, client: ClientState, msg_id: bytes) -> Message:
        msg = client.in_flight.pop(msg_id, None)
        if msg is None:
            raise InFlightError(self._why_not_in_flight(msg_id))
        self.in_flight_count -= 1
        msg.client = None
        return msg

    def _why_not_in_flight(self, msg_id: bytes) -> str:
        for other in self.clients.values():
            if msg_id in other.in_flight:
                return "client does not own message"
        return "ID not in flight"

    def finish(self, client: ClientState, msg_id: bytes, now: float) -> None:
        self._take(client, msg_id)
        client.finish_count += 1
        if not client.in_ready:
            self.client_ready(client, now)

    def finish_many(
        self, client: ClientState, ids: list[bytes], now: float
    ) -> list[tuple[bytes, str]]:
        """FIN a batch of ids; returns ``(id, reason)`` for each that failed, in order."""
        in_flight = client.in_flight
        errors: list[tuple[bytes, str]] = []
        done = 0
        for msg_id in ids:
            if in_flight.pop(msg_id, None) is None:
                errors.append((msg_id, self._why_not_in_flight(msg_id)))
            else:
                done += 1
        self.in_flight_count -= done
        client.finish_count += done
        if done and not client.in_ready:
            self.client_ready(client, now)
        return errors

    def requeue(self, client: ClientState, msg_id: bytes, delay: float, now: float) -> None:
        msg = self._take(client, msg_id)
        self.requeue_count += 1
        client.requeue_count += 1
        if delay > 0:
            heapq.heappush(self._deferred, (now + delay, next(self._seq), msg))
        else:
            self._put(msg, now)
        if not client.in_ready:
            self.client_ready(client, now)

    def touch(self, client: ClientState, msg_id: bytes, now: float) -> None:
        msg = client.in_flight.pop(msg_id, None)
        if msg is None:
            raise InFlightError(self._why_not_in_flight(msg_id))
        deadline = now + client.msg_timeout
        cap = msg.delivery_ts + self.max_msg_timeout
        if deadline > cap:
            deadline = cap
            client.capped.add(msg_id)
        msg.deadline = deadline
        client.in_flight[msg_id] = msg  # re-inserted last: keeps the dict in deadline order

    # -- timeouts -----------------------------------------------------------------------
    def process(self, now: float) -> bool:
        """Expire in-flight messages and release due deferred ones; True if any work."""
        dirty = False
        for client in list(self.clients.values()):
            if client.in_flight and self._expire(client, now):
                dirty = True
        deferred = self._deferred
        while deferred and deferred[0][0] <= now:
            self._put(heapq.heappop(deferred)[2], now)
            dirty = True
        return dirty

    def _expire(self, client: ClientState, now: float) -> bool:
        in_flight = client.in_flight
        expired = []
        for msg in in_flight.values():
            if msg.deadline > now:
                break
            expired.append(msg)
        for msg in expired:
            del in_flight[msg.id]
        for msg_id in list(client.capped):
            capped = in_flight.get(msg_id)
            if capped is None or capped.deadline <= now:
                client.capped.discard(msg_id)
            if capped is not None and capped.deadline <= now:
                del in_flight[msg_id]
                expired.append(capped)
        if not expired:
            return False
        self.in_flight_count -= len(expired)
        self.timeout_count += len(expired)
        for msg in expired:
            msg.client = None
            self._put(msg, now)
        self.client_ready(client, now)
        return True

    # -- admin ---------------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True

    def unpause(self, now: float) -> None:
        self.paused = False
        for client in list(self.clients.values()):
            self.client_ready(client, now)

    def empty(self, now: float) -> None:
        """Drop queued, in-flight and deferred messages (nsqd's /channel/empty)."""
        self.queue.clear()
        self._deferred.clear()
        for client in self.clients.values():
            client.in_flight.clear()
            client.capped.clear()
        self.in_flight_count = 0
        for client in list(self.clients.values()):
            self.client_ready(client, now)

    def drain_messages(self) -> list[Message]:
        """Everything the channel holds (queued, in flight, deferred), for persistence."""
        held = list(self.queue)
        for client in self.clients.values():
            held.extend(client.in_flight.values())
        held.extend(entry[2] for entry in self._deferred)
        return held
