# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled twin of the channel's per-message work (see ``nsqpy.nsqd.core.speedups``).

Every function mirrors, statement for statement, a pure-Python twin in ``nsqpy.nsqd.core``
(``channel``, ``message``, ``guid``); the test suite runs both and compares what they do.
The channel, its clients and the messages stay ordinary Python objects: this module only
runs their loops without the interpreter. No I/O: messages go to ``client.write_message``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_REFCNT, Py_XDECREF
from cpython.list cimport PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_Check
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from types import MemberDescriptorType

from nsqpy.nsqd.core import records
from nsqpy.nsqd.core.message import Message, materialize

cdef object MessageType = Message
cdef tuple _NO_ARGS = ()
cdef bytes _HEX = b"0123456789abcdef"


cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member

cdef enum:
    _T_OBJECT_EX = 16  # structmember.h: what __slots__ members are
    _READONLY = 1


cdef Py_ssize_t _slot_offset(str name) except -2:
    """Where Message keeps slot ``name`` in the object (what its member descriptor writes
    through), or -1 if it is not a plain writable object slot."""
    descr = Message.__dict__.get(name)
    if type(descr) is not MemberDescriptorType:
        return -1
    cdef PyMemberDef* member = (<PyMemberDescrObject*><PyObject*>descr).d_member
    if member.type != _T_OBJECT_EX or member.flags & _READONLY:
        return -1
    return member.offset


cdef Py_ssize_t _ID = _slot_offset("id")
cdef Py_ssize_t _BODY = _slot_offset("body")
cdef Py_ssize_t _TIMESTAMP = _slot_offset("timestamp")
cdef Py_ssize_t _ATTEMPTS = _slot_offset("attempts")
cdef Py_ssize_t _DEFERRED = _slot_offset("deferred")
cdef Py_ssize_t _DEADLINE = _slot_offset("deadline")
cdef Py_ssize_t _DELIVERY_TS = _slot_offset("delivery_ts")
cdef Py_ssize_t _TOKEN = _slot_offset("token")
#: Message has exactly these slots, all plain: new messages are filled in directly.
cdef bint _DIRECT = (
    set(Message.__slots__) == {
        "id", "body", "timestamp", "attempts", "deferred", "deadline", "delivery_ts", "token"
    }
    and min(_ID, _BODY, _TIMESTAMP, _ATTEMPTS, _DEFERRED, _DEADLINE, _DELIVERY_TS, _TOKEN) > 0
)
cdef object _ZERO = 0
cdef object _ONE = 1
cdef object _MINUS_ONE = -1
cdef object _NO_TIME = 0.0


cdef inline void _init_slot(object msg, Py_ssize_t offset, object value) noexcept:
    """Set a slot of a Message fresh from tp_new (so still empty)."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>msg) + offset))[0] = <PyObject*>value


cdef inline object _read_slot(object msg, Py_ssize_t offset, str name):
    """A slot of a Message (exact type, ``_DIRECT``); getattr's AttributeError if empty."""
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>msg) + offset))[0]
    if value == NULL:
        raise AttributeError(name)
    return <object>value


cdef inline void _replace_slot(object msg, Py_ssize_t offset, object value) noexcept:
    """Set a slot already holding a value (what the member descriptor's set does)."""
    cdef PyObject** where = <PyObject**>((<char*><PyObject*>msg) + offset)
    cdef PyObject* old = where[0]
    Py_INCREF(value)
    where[0] = <PyObject*>value
    Py_XDECREF(old)


#: Finished messages nothing else held, every slot cleared, for ``_blank`` to hand out again
#: instead of one allocated per delivery and deallocated per FIN (through ``subtype_dealloc``
#: and the GC allocator): durable PUB+SUB +4.3 % (5 pairs), memory +1.9 %. Bounded: at most
#: ``SPARE_MAX`` (~0.4 MB) stay allocated once traffic stops.
cdef list _spare = []
cdef Py_ssize_t SPARE_MAX = 4096


cdef inline object _blank():
    """``object.__new__(Message)``: a Message with no slot set, without a Python call (a
    spare one when there is one).

    Untracked by the cycle collector when its slots are all plain (``_DIRECT``): they only
    ever hold bytes, ints, floats and strs, so a message can never be part of a cycle, and
    the hundreds of thousands made per second were ~4 % of the broker in gc_collect_main
    (each young collection walked every message still queued or in flight)."""
    if _DIRECT and PyList_GET_SIZE(_spare):
        return _spare.pop()
    msg = (<PyTypeObject*>MessageType).tp_new(MessageType, <PyObject*>_NO_ARGS, NULL)
    if _DIRECT:
        PyObject_GC_UnTrack(msg)
    return msg


cdef inline void _clear_slot(object msg, Py_ssize_t offset) noexcept:
    cdef PyObject** where = <PyObject**>((<char*><PyObject*>msg) + offset)
    cdef PyObject* old = where[0]
    where[0] = NULL
    Py_XDECREF(old)


cdef inline void _recycle(object msg) noexcept:
    """Keep ``msg`` (a plain Message, held by the caller's reference alone) for ``_blank``,
    its slots cleared as its deallocation would clear them, and untracked like every message
    ``_blank`` hands out (one made by ``Message(...)`` in Python is tracked)."""
    if not _DIRECT or type(msg) is not MessageType or Py_REFCNT(msg) != 1:
        return
    if PyList_GET_SIZE(_spare) >= SPARE_MAX:
        return
    PyObject_GC_UnTrack(msg)  # a no-op when it is not tracked
    _clear_slot(msg, _ID)
    _clear_slot(msg, _BODY)
    _clear_slot(msg, _TIMESTAMP)
    _clear_slot(msg, _ATTEMPTS)
    _clear_slot(msg, _DEFERRED)
    _clear_slot(msg, _DEADLINE)
    _clear_slot(msg, _DELIVERY_TS)
    _clear_slot(msg, _TOKEN)
    _spare.append(msg)


def spare_count():
    """How many finished messages wait for reuse (tests)."""
    return PyList_GET_SIZE(_spare)


cdef inline object _new_message(object msg_id, object body, object timestamp):
    """``Message.__new__`` with every slot as ``Message.__init__`` leaves it."""
    msg = _blank()
    if _DIRECT:
        _init_slot(msg, _ID, msg_id)
        _init_slot(msg, _BODY, body)
        _init_slot(msg, _TIMESTAMP, timestamp)
        _init_slot(msg, _ATTEMPTS, _ZERO)
        _init_slot(msg, _DEFERRED, _NO_TIME)
        _init_slot(msg, _DEADLINE, _NO_TIME)
        _init_slot(msg, _DELIVERY_TS, _NO_TIME)
        _init_slot(msg, _TOKEN, _MINUS_ONE)
        return msg
    msg.id = msg_id
    msg.body = body
    msg.timestamp = timestamp
    msg.attempts = 0
    msg.deferred = 0.0
    msg.deadline = 0.0
    msg.delivery_ts = 0.0
    msg.token = -1
    return msg


cdef inline object _delivered(tuple item, object now, object deadline):
    """``message.delivered``: the in-flight Message for a fresh entry (``now`` and
    ``deadline`` already boxed: one float object each per batch, not per message)."""
    msg = _blank()
    if _DIRECT:
        _init_slot(msg, _ID, item[0])
        _init_slot(msg, _BODY, item[1])
        _init_slot(msg, _TIMESTAMP, item[2])
        _init_slot(msg, _ATTEMPTS, _ONE)
        _init_slot(msg, _DEFERRED, _NO_TIME)
        _init_slot(msg, _DELIVERY_TS, now)
        _init_slot(msg, _DEADLINE, deadline)
        _init_slot(msg, _TOKEN, _MINUS_ONE)
        return msg
    msg.id = item[0]
    msg.body = item[1]
    msg.timestamp = item[2]
    msg.attempts = 1
    msg.deferred = 0.0
    msg.delivery_ts = now
    msg.deadline = deadline
    msg.token = -1
    return msg


def with_tokens(list items, tokens):
    """``message.with_tokens``: messages for the first ``len(tokens)`` items, each with its
    record's token; fresh entries are made with the token in place (no __init__, no
    setattr: ~0.4 us a message less in durable PUB+SUB)."""
    cdef Py_ssize_t n = len(tokens)
    if n > len(items):
        raise ValueError("zip() argument 2 is longer than argument 1")
    cdef list out = []
    cdef Py_ssize_t i = 0
    for token in tokens:
        item = items[i]
        i += 1
        if PyTuple_Check(item) and _DIRECT:
            msg = _new_message((<tuple>item)[0], (<tuple>item)[1], (<tuple>item)[2])
            _replace_slot(msg, _TOKEN, token)
        else:
            msg = materialize(item)
            msg.token = token
        out.append(msg)
    return out


def fresh_entries(ids, bodies, ts):
    """``message.fresh_entries``: ``(id, body, ts)`` per message, and the bodies' bytes, in
    one loop (the pure twin's zip and ``sum(map(len, ...))`` were ~5 % of the broker under
    PUB+SUB)."""
    cdef list id_list = ids if type(ids) is list else list(ids)
    cdef list body_list = bodies if type(bodies) is list else list(bodies)
    cdef Py_ssize_t n = len(id_list)
    cdef Py_ssize_t k
    cdef Py_ssize_t size = 0
    if len(body_list) != n:
        raise ValueError("zip() argument 2 is shorter than argument 1"
                         if len(body_list) < n else "zip() argument 2 is longer than argument 1")
    cdef list out = PyList_New(n)
    for k in range(n):
        body = body_list[k]
        size += len(body)
        entry = (id_list[k], body, ts)
        Py_INCREF(entry)
        PyList_SET_ITEM(out, k, entry)
    return out, size


def delivered(tuple item, double now, double timeout):
    return _delivered(item, now, now + timeout)


cdef inline object _redelivered(object msg, object now, object deadline):
    """A message object delivered (again): one more attempt, in flight from ``now`` until
    ``deadline``; returns its id. Durable mode delivers every message this way (it already
    holds its disk token): a Message's slots are written directly, not through three
    setattr calls and two getattr calls (delivering a durable MPUB of 200, p50 41 -> 28 us)."""
    if _DIRECT and type(msg) is MessageType:
        _replace_slot(msg, _ATTEMPTS, _read_slot(msg, _ATTEMPTS, "attempts") + 1)
        _replace_slot(msg, _DELIVERY_TS, now)
        _replace_slot(msg, _DEADLINE, deadline)
        return _read_slot(msg, _ID, "id")
    msg.attempts += 1
    msg.delivery_ts = now
    msg.deadline = deadline
    return msg.id


cdef inline int _to_run(object item, dict in_flight, list run, object now,
                        object deadline) except -1:
    """A message of a run: in flight from ``now`` until ``deadline`` (fresh entries are made
    into messages, requeued messages delivered again), then appended to ``run``."""
    if PyTuple_Check(item):
        msg = _delivered(<tuple>item, now, deadline)
        in_flight[(<tuple>item)[0]] = msg  # its id, without looking it up on the message
    else:
        msg = item
        in_flight[_redelivered(msg, now, deadline)] = msg
    run.append(msg)
    return 0


#: channel.TURN: the most messages one client gets in one turn of ``deliver``.
cdef Py_ssize_t TURN = 256


def deliver(channel, list msgs, double now):
    """``Channel.put_many``'s loop (``py_deliver``): hand ``msgs`` to the ready clients in
    turns, a run of messages per turn; returns how many went."""
    ready = channel._ready
    cdef Py_ssize_t count = len(msgs)
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t j, room, take
    cdef dict in_flight
    cdef list run
    cdef object now_obj = now
    cdef Py_ssize_t share = (count + len(ready) - 1) // len(ready) if ready else 1
    if share > TURN:
        share = TURN
    while i < count and ready and not channel.paused:
        client = ready[0]
        in_flight = client.in_flight
        room = client.rdy - len(in_flight)
        if room <= 0 or not client.writable:
            ready.popleft()
            client.in_ready = False
            continue
        if client.sample_rate:
            channel._send(client, materialize(msgs[i]), now)
            i += 1
            ready.rotate(-1)
            continue
        take = share
        if take > room:
            take = room
        if take > count - i:
            take = count - i
        deadline = now + <double>client.msg_timeout
        run = []
        for j in range(i, i + take):
            _to_run(msgs[j], in_flight, run, now_obj, deadline)
        client.message_count += take
        channel.in_flight_count += take
        client.write_messages(run)
        i += take
        ready.rotate(-1)
    return i


def fill(channel, client, double now):
    """``Channel._fill`` (``py_fill``): deliver queued messages in runs while the client's
    window is open."""
    queue = channel.queue
    cdef dict in_flight = client.in_flight
    cdef double timeout = client.msg_timeout
    backend = channel.backend
    popleft = queue.popleft
    cdef object now_obj = now
    cdef object deadline = now + timeout
    cdef Py_ssize_t room, take, k
    cdef list run
    while client.writable:
        room = client.rdy - len(in_flight)
        if room <= 0:
            break
        if not queue:
            if backend is None or not backend.depth:
                break
            msg = channel._pop_queued(now, room)
            if msg is None:
                break
            channel._send(client, msg, now)
            continue
        if client.sample_rate:
            channel._send(client, materialize(popleft()), now)
            continue
        take = len(queue)
        if take > room:
            take = room
        if take > TURN:
            take = TURN
        run = []
        for k in range(take):
            _to_run(popleft(), in_flight, run, now_obj, deadline)
        client.message_count += take
        channel.in_flight_count += take
        client.write_messages(run)


def finish_many(channel, client, list ids, double now):
    """``Channel.finish_many``: FIN a batch; ``(id, reason)`` for each that failed."""
    cdef dict in_flight = client.in_flight
    cdef list errors = []
    cdef list tokens = []
    cdef Py_ssize_t done = 0
    e2e = channel.e2e
    wall = channel.wall_ns() if e2e is not None else 0
    for msg_id in ids:
        msg = in_flight.pop(msg_id, None)
        if msg is None:
            errors.append((msg_id, channel._why_not_in_flight(msg_id)))
            continue
        done += 1
        token = _read_slot(msg, _TOKEN, "token") if type(msg) is MessageType and _DIRECT else msg.token
        if token >= 0:
            tokens.append(token)
        if e2e is not None:
            e2e.insert(wall - msg.timestamp, wall)
        _recycle(msg)
    if tokens:
        channel._forget_tokens(tokens)
    channel.in_flight_count -= done
    client.finish_count += done
    if done and (not client.in_ready or channel._backlog()):
        channel.client_ready(client, now)
    return errors


def plain_message(bytes data):
    """The Message of a plain (NSQ-format) disk record; None for an extended one."""
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef uint64_t ts = 0
    cdef int k
    if size and p[0] == 0xFF:
        return None
    if size < 26:
        raise ValueError(f"invalid message buffer size ({size})")
    for k in range(8):
        ts = (ts << 8) | p[k]
    msg = _new_message(
        PyBytes_FromStringAndSize(<const char*>p + 10, 16),
        PyBytes_FromStringAndSize(<const char*>p + 26, size - 26),
        <int64_t>ts,
    )
    msg.attempts = (<int>p[8] << 8) | p[9]
    return msg


def plain_records(list msgs):
    """``backend.write_messages``' encoding: a disk record per queued message."""
    cdef list out = []
    cdef bytes msg_id, body
    cdef uint64_t ts
    cdef Py_ssize_t id_len, body_len
    cdef char* p
    cdef int k
    encode = records.encode
    for m in msgs:
        if PyTuple_Check(m) and type((<tuple>m)[0]) is bytes and type((<tuple>m)[1]) is bytes:
            msg_id = (<tuple>m)[0]
            body = (<tuple>m)[1]
            ts = <uint64_t><int64_t>(<tuple>m)[2]
            id_len = PyBytes_GET_SIZE(msg_id)
            body_len = PyBytes_GET_SIZE(body)
            rec = PyBytes_FromStringAndSize(NULL, 10 + id_len + body_len)
            p = PyBytes_AS_STRING(rec)
            for k in range(8):
                p[k] = <char>(ts >> (56 - 8 * k))
            p[8] = 0
            p[9] = 0
            memcpy(p + 10, PyBytes_AS_STRING(msg_id), id_len)
            memcpy(p + 10 + id_len, PyBytes_AS_STRING(body), body_len)
            out.append(rec)
        elif PyTuple_Check(m):
            out.append(records.encode_plain(m[2], m[0], m[1]))
        else:
            out.append(encode(m.timestamp, m.attempts, m.id, m.body, m.due_ns(), m.origin))
    return out


def render_ids(list out, prefix, Py_ssize_t first, Py_ssize_t take):
    """Append ``prefix`` (13 hex digits) + each sequence ``first..first+take-1`` (3 hex
    digits) to ``out``: ``GuidFactory.new_ids``' inner step."""
    cdef bytes head = b"%013x" % prefix
    cdef const char* hexd = PyBytes_AS_STRING(_HEX)
    cdef char buf[16]
    cdef Py_ssize_t seq
    memcpy_13(buf, PyBytes_AS_STRING(head))
    for seq in range(first, first + take):
        buf[13] = hexd[(seq >> 8) & 0xF]
        buf[14] = hexd[(seq >> 4) & 0xF]
        buf[15] = hexd[seq & 0xF]
        out.append(PyBytes_FromStringAndSize(buf, 16))


cdef inline void memcpy_13(char* dst, const char* src) noexcept:
    cdef int k
    for k in range(13):
        dst[k] = src[k]
