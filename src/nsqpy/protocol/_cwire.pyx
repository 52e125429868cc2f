# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled twin of the V2 codec's per-message work (see ``nsqpy.protocol.speedups``).

Each function here has a pure-Python twin with the same name in ``command_reader`` or
``frames``; both give the same results, the same errors and the same bytes, and the test
suite runs both. Nothing here does I/O.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from types import MemberDescriptorType

from nsqpy.protocol.errors import ClientError


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    ctypedef struct _TypeAccess "PyTypeObject":
        void* tp_getattro

cdef enum:
    _T_OBJECT_EX = 16  # structmember.h: what __slots__ members are


cdef class _Slots:
    """Where a ``__slots__`` class keeps a message's id, body, timestamp and attempts, so
    that framing a run reads them straight from the object instead of four attribute
    lookups per message (~4 % of the broker under PUB+SUB). Only for a type whose
    attribute access is the generic one and whose four names are plain slots; any other
    type is read with getattr. A slot found empty is read with getattr too (which raises
    the AttributeError Python would)."""

    cdef object tp
    cdef bint direct
    cdef Py_ssize_t id, body, timestamp, attempts

    cdef int learn(self, object tp) except -1:
        self.tp = tp
        self.direct = False
        if (<_TypeAccess*><PyObject*>tp).tp_getattro != (<_TypeAccess*><PyObject*>object).tp_getattro:
            return 0
        cdef Py_ssize_t[4] found
        cdef int k
        for k, name in enumerate(("id", "body", "timestamp", "attempts")):
            found[k] = _slot_offset(tp, name)
            if found[k] <= 0:
                return 0
        self.id, self.body, self.timestamp, self.attempts = found[0], found[1], found[2], found[3]
        self.direct = True
        return 0


cdef Py_ssize_t _slot_offset(object tp, str name):
    """The offset of plain object slot ``name`` as ``tp``'s attribute lookup finds it, or -1."""
    for klass in tp.__mro__:
        descr = klass.__dict__.get(name)
        if descr is None:
            continue
        if type(descr) is not MemberDescriptorType:
            return -1
        if (<PyMemberDescrObject*><PyObject*>descr).d_member.type != _T_OBJECT_EX:
            return -1
        return (<PyMemberDescrObject*><PyObject*>descr).d_member.offset
    return -1


cdef inline object _slot(object msg, Py_ssize_t offset, str name):
    cdef PyObject* value = (<PyObject**>((<char*><PyObject*>msg) + offset))[0]
    if value == NULL:
        return getattr(msg, name)
    return <object>value


cdef inline int32_t _be32(const uint8_t* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


def parse_mpub(bytes body, long long max_msg_size, long long max_body_size):
    cdef Py_ssize_t end = PyBytes_GET_SIZE(body)
    cdef const uint8_t* data = <const uint8_t*>PyBytes_AS_STRING(body)
    cdef long long count, i, size
    cdef Py_ssize_t pos = 4
    if end < 4:
        raise ClientError("E_BAD_BODY", "MPUB failed to read message count")
    count = _be32(data)
    if count <= 0 or count > (max_body_size - 4) // 5:
        raise ClientError("E_BAD_BODY", f"MPUB invalid message count {count}")
    cdef list out = []
    for i in range(count):
        if end - pos < 4:
            raise ClientError("E_BAD_MESSAGE", f"MPUB failed to read message({i}) body size")
        size = _be32(data + pos)
        pos += 4
        if size <= 0:
            raise ClientError("E_BAD_MESSAGE", f"MPUB invalid message({i}) body size {size}")
        if size > max_msg_size:
            raise ClientError("E_BAD_MESSAGE", f"MPUB message too big {size} > {max_msg_size}")
        if end - pos < size:
            raise ClientError("E_BAD_MESSAGE", "MPUB failed to read message body")
        out.append(PyBytes_FromStringAndSize(<const char*>data + pos, <Py_ssize_t>size))
        pos += <Py_ssize_t>size
    return out


def fin_run(bytes data, Py_ssize_t pos):
    cdef Py_ssize_t end = PyBytes_GET_SIZE(data)
    cdef const uint8_t* p
    cdef const uint8_t* buf = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef list out = []
    cdef int j
    cdef uint8_t c
    if pos < 0:
        pos = 0
    while end - pos >= 21:
        p = buf + pos
        if p[0] != 70 or p[1] != 73 or p[2] != 78 or p[3] != 32 or p[20] != 10:  # "FIN ", \n
            break
        for j in range(4, 19):
            c = p[j]
            if c == 32 or c == 10:
                break
        else:
            c = p[19]
            if c != 32 and c != 10 and c != 13:
                out.append(PyBytes_FromStringAndSize(<const char*>p + 4, 16))
                pos += 21
                continue
        break
    return out


cdef inline void _put_frame(uint8_t* p, int64_t timestamp, long attempts, object msg_id,
                            object body):
    """Write a message frame at ``p``: [size][type 2][timestamp][attempts][id][body]."""
    cdef Py_ssize_t id_len = PyBytes_GET_SIZE(msg_id)
    cdef Py_ssize_t body_len = PyBytes_GET_SIZE(body)
    cdef uint64_t ts = <uint64_t>timestamp
    _put32(p, <uint32_t>(body_len + 30))
    _put32(p + 4, 2)
    _put32(p + 8, <uint32_t>(ts >> 32))
    _put32(p + 12, <uint32_t>ts)
    p[16] = <uint8_t>((attempts >> 8) & 0xFF)
    p[17] = <uint8_t>(attempts & 0xFF)
    memcpy(p + 18, PyBytes_AS_STRING(msg_id), id_len)
    memcpy(p + 18 + id_len, PyBytes_AS_STRING(body), body_len)


cdef int _append_frame(bytearray out, int64_t timestamp, long attempts, object msg_id,
                       object body) except -1:
    """Append a message frame (see ``_put_frame``)."""
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out)
    PyByteArray_Resize(out, start + 18 + PyBytes_GET_SIZE(msg_id) + PyBytes_GET_SIZE(body))
    _put_frame(<uint8_t*>PyByteArray_AS_STRING(out) + start, timestamp, attempts, msg_id, body)
    return 0


cdef class MessageSink:
    """Frames delivered messages into ``owner._out``; asks the owner to flush at
    ``flush_at`` bytes, or to schedule a flush when the buffer was clean."""

    cdef object owner
    cdef Py_ssize_t flush_at
    cdef _Slots slots

    def __init__(self, owner, Py_ssize_t flush_at):
        self.owner = owner
        self.flush_at = flush_at
        self.slots = _Slots()

    def write(self, msg):
        owner = self.owner
        cdef bytearray out = owner._out
        cdef object msg_id = msg.id
        cdef object body = msg.body
        if type(msg_id) is not bytes or type(body) is not bytes:
            msg_id = bytes(msg_id)
            body = bytes(body)
        _append_frame(out, msg.timestamp, msg.attempts, msg_id, body)
        if PyByteArray_GET_SIZE(out) >= self.flush_at:
            owner.flush()
        elif not owner.flush_pending:
            owner.request_flush()

    def write_many(self, list msgs):
        """``write`` for each of ``msgs``, the owner looked up once per run: a flush at
        ``flush_at`` bytes, else one flush requested at the end if none is pending.

        The buffer is grown for the rest of the run at once (sized by the frame in hand) and
        trimmed at the end: growing it frame by frame reallocated and copied it ~40 times
        per flush (bytearray grows by an eighth), ~3 % of the broker under PUB+SUB."""
        owner = self.owner
        cdef bytearray out = owner._out
        cdef Py_ssize_t used = PyByteArray_GET_SIZE(out)
        cdef Py_ssize_t cap = used
        cdef Py_ssize_t left = len(msgs)
        cdef Py_ssize_t need
        cdef _Slots slots = self.slots
        try:
            for msg in msgs:
                if type(msg) is not slots.tp:
                    slots.learn(type(msg))
                if slots.direct:
                    msg_id = _slot(msg, slots.id, "id")
                    body = _slot(msg, slots.body, "body")
                    timestamp = _slot(msg, slots.timestamp, "timestamp")
                    attempts = _slot(msg, slots.attempts, "attempts")
                else:
                    msg_id = msg.id
                    body = msg.body
                    timestamp = msg.timestamp
                    attempts = msg.attempts
                if type(msg_id) is not bytes or type(body) is not bytes:
                    msg_id = bytes(msg_id)
                    body = bytes(body)
                need = 18 + PyBytes_GET_SIZE(msg_id) + PyBytes_GET_SIZE(body)
                if used + need > cap:
                    # room for the rest of the run, but no further than a flush would let it grow
                    cap = min(used + need * left, max(used, self.flush_at) + need)
                    PyByteArray_Resize(out, cap)
                _put_frame(<uint8_t*>PyByteArray_AS_STRING(out) + used, timestamp, attempts,
                           msg_id, body)
                used += need
                left -= 1
                if used >= self.flush_at:
                    PyByteArray_Resize(out, used)
                    owner.flush()
                    out = owner._out  # the flush handed the old buffer to the transport
                    used = cap = PyByteArray_GET_SIZE(out)
        finally:
            if cap != used:  # also when a message was bad: no half-made frame stays
                PyByteArray_Resize(out, used)
        if used and not owner.flush_pending:
            owner.request_flush()
