# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled twin of the channel's per-message work (see ``nsqpy.nsqd.core.speedups``).

Every function mirrors, statement for statement, a pure-Python twin in ``nsqpy.nsqd.core``
(``channel``, ``message``, ``guid``); the test suite runs both and compares what they do.
``InFlight``'s twin is the plain ``dict`` a client holds its in-flight messages in.
The channel, its clients and the messages stay ordinary Python objects: this module only
runs their loops without the interpreter. No I/O: messages go to ``client.write_message``.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_REFCNT, Py_XDECREF
from cpython.list cimport PyList_GET_SIZE, PyList_New, PyList_SET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.tuple cimport PyTuple_Check
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

from collections.abc import MutableMapping
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


# -- a client's in-flight messages ---------------------------------------------------------

cdef extern from *:
    """
    typedef struct { uint64_t k0; uint64_t k1; PyObject* value; int32_t slot; } nsqpy_entry;
    #define nsqpy_prefetch(p) __builtin_prefetch(p)
    """
    ctypedef struct nsqpy_entry:
        uint64_t k0
        uint64_t k1
        PyObject* value
        int32_t slot
    void nsqpy_prefetch(const void* p) noexcept

cdef enum:
    _EMPTY = -1  # an index slot never used since the last rebuild: a probe stops here
    _GONE = -2   # an index slot whose entry was removed: a probe goes on


cdef inline bint _split(object key, uint64_t* k0, uint64_t* k1) noexcept:
    """The two words of a 16-byte id; False for anything else (never in flight)."""
    if type(key) is not bytes or PyBytes_GET_SIZE(key) != 16:
        return False
    memcpy(k0, PyBytes_AS_STRING(key), 8)
    memcpy(k1, PyBytes_AS_STRING(key) + 8, 8)
    return True


cdef inline uint64_t _hash(uint64_t k0, uint64_t k1) noexcept:
    """Every bit of the id into the low bits the index uses (MurmurHash3's 64-bit finalizer):
    nsqd's ids share their first 13 hex digits within a millisecond, and differ in the last
    three, which are the high bytes of ``k1``."""
    cdef uint64_t h = k0 ^ ((k1 << 32) | (k1 >> 32))
    h ^= h >> 33
    h *= <uint64_t>0xFF51AFD7ED558CCD
    h ^= h >> 33
    h *= <uint64_t>0xC4CEB9FE1A85EC53
    return h ^ (h >> 33)


cdef inline void _swap(PyObject** where, object value) noexcept:
    """Put ``value`` where ``old`` was; ``old`` is released last, as its release may run code."""
    cdef PyObject* old = where[0]
    Py_INCREF(value)
    where[0] = <PyObject*>value
    Py_XDECREF(old)


cdef class InFlight:
    """A client's in-flight messages by id, in insertion order: the part of ``dict`` that
    ``ClientState.in_flight`` is used through, for 16-byte ids (nsqd's; any other key is
    never in flight, and setting one is a TypeError).

    A compact hash table as CPython's dict is (an index of slots into an array of entries in
    insertion order), with the ids inside the entries as two words: a lookup hashes and
    compares 16 bytes in place, with no siphash of the FIN's fresh bytes object and no visit
    to the stored key. Consumers mostly finish in delivery order, so a removal first looks
    at the oldest entry, without a probe. ``finish_many`` also asks the CPU ahead for the
    messages a run of FINs is about to release, delivered ~RDY messages earlier and long
    out of its caches (``prefetch``, ``ahead``). With RDY 2,500 under NSQ's PUB+SUB bench,
    +2 to +16 % on the mean of six A/Bs (docs/performance.md, sixteenth pass).

    As with a dict: iteration, ``keys()``, ``values()`` and ``items()`` go in insertion
    order, and setting a present id keeps its place. Unlike it, those four return lists
    (snapshots), and the table holds no ``None`` (``take`` answers None for "not here")."""

    cdef nsqpy_entry* entries
    cdef int32_t* index
    cdef Py_ssize_t used     # entries appended since the last rebuild (live or removed)
    cdef Py_ssize_t live
    cdef Py_ssize_t first    # no live entry before it
    cdef Py_ssize_t cap      # room in entries
    cdef Py_ssize_t mask     # index size - 1 (at least 1.5 x cap)

    def __cinit__(self):
        self.entries = NULL
        self.index = NULL
        self._rebuild(8)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.entries != NULL:
            for i in range(self.first, self.used):
                Py_XDECREF(self.entries[i].value)
            PyMem_Free(self.entries)
        PyMem_Free(self.index)

    cdef int _rebuild(self, Py_ssize_t cap) except -1:
        """The live entries, in order, moved into a table with room for ``cap``."""
        cdef Py_ssize_t size = 16
        while 2 * size < 3 * cap:  # at most two thirds full, with removed slots counted
            size *= 2
        cdef nsqpy_entry* entries = <nsqpy_entry*>PyMem_Malloc(cap * sizeof(nsqpy_entry))
        cdef int32_t* index = <int32_t*>PyMem_Malloc(size * sizeof(int32_t))
        if entries == NULL or index == NULL:
            PyMem_Free(entries)
            PyMem_Free(index)
            raise MemoryError()
        memset(index, 0xFF, size * sizeof(int32_t))  # all _EMPTY
        cdef Py_ssize_t n = 0, i, slot
        cdef uint64_t mask = size - 1
        if self.entries != NULL:
            for i in range(self.first, self.used):
                if self.entries[i].value == NULL:
                    continue
                entries[n] = self.entries[i]
                slot = _hash(entries[n].k0, entries[n].k1) & mask
                while index[slot] != _EMPTY:
                    slot = (slot + 1) & mask
                index[slot] = <int32_t>n
                entries[n].slot = <int32_t>slot
                n += 1
            PyMem_Free(self.entries)
            PyMem_Free(self.index)
        self.entries = entries
        self.index = index
        self.used = n
        self.live = n
        self.first = 0
        self.cap = cap
        self.mask = size - 1
        return 0

    cdef inline Py_ssize_t _find(self, uint64_t k0, uint64_t k1, Py_ssize_t* free_slot) noexcept:
        """The index slot holding the id, or -1 (then ``free_slot``: where to add it)."""
        cdef Py_ssize_t slot = _hash(k0, k1) & self.mask
        cdef Py_ssize_t reuse = -1
        cdef int32_t ix
        cdef nsqpy_entry* e
        while True:
            ix = self.index[slot]
            if ix == _EMPTY:
                if free_slot != NULL:
                    free_slot[0] = slot if reuse < 0 else reuse
                return -1
            if ix == _GONE:
                if reuse < 0:
                    reuse = slot
            else:
                e = &self.entries[ix]
                if e.k0 == k0 and e.k1 == k1:
                    return slot
            slot = (slot + 1) & self.mask

    cdef int set(self, object key, object value) except -1:
        """``self[key] = value``."""
        cdef uint64_t k0, k1
        cdef Py_ssize_t free_slot = 0, slot
        if not _split(key, &k0, &k1):
            raise TypeError(f"in-flight ids are 16 bytes, not {key!r}")
        if value is None:
            raise TypeError("an in-flight message cannot be None")
        slot = self._find(k0, k1, &free_slot)
        if slot >= 0:
            _swap(&self.entries[self.index[slot]].value, value)
            return 0
        if self.used == self.cap:  # room for as many again as are live (amortized O(1))
            self._rebuild(max(8, 2 * self.live + 2))
            self._find(k0, k1, &free_slot)
        cdef nsqpy_entry* e = &self.entries[self.used]
        e.k0 = k0
        e.k1 = k1
        Py_INCREF(value)
        e.value = <PyObject*>value
        self.index[free_slot] = <int32_t>self.used
        e.slot = <int32_t>free_slot
        self.used += 1
        self.live += 1
        return 0

    cdef object take(self, object key):
        """Remove the id's message and return it; None if it is not here."""
        cdef uint64_t k0, k1
        if not _split(key, &k0, &k1):
            return None
        cdef Py_ssize_t ix = self.first
        cdef Py_ssize_t slot
        cdef nsqpy_entry* e
        if ix < self.used and self.entries[ix].k0 == k0 and self.entries[ix].k1 == k1:
            e = &self.entries[ix]  # the oldest: no probe
        else:
            slot = self._find(k0, k1, NULL)
            if slot < 0:
                return None
            ix = self.index[slot]
            e = &self.entries[ix]
        cdef PyObject* value = e.value
        e.value = NULL
        self.index[e.slot] = _GONE
        self.live -= 1
        if ix == self.first:
            while self.first < self.used and self.entries[self.first].value == NULL:
                self.first += 1
        result = <object>value   # a reference of its own...
        Py_XDECREF(value)        # ...so the table's goes
        return result

    cdef void prefetch(self, Py_ssize_t n) noexcept:
        """Ask the CPU for the oldest ``n`` messages (a run of FINs is coming for them)."""
        cdef Py_ssize_t i
        cdef Py_ssize_t end = self.first + n
        if end > self.used:
            end = self.used
        for i in range(self.first, end):
            if self.entries[i].value != NULL:
                nsqpy_prefetch(self.entries[i].value)

    cdef inline PyObject* ahead(self, Py_ssize_t k) noexcept:
        """The ``k``-th oldest entry's message (may be a removed one's NULL)."""
        cdef Py_ssize_t i = self.first + k
        return self.entries[i].value if i < self.used else NULL

    cdef PyObject* _get(self, object key) noexcept:
        """The id's message (borrowed), or NULL if it is not here."""
        cdef uint64_t k0, k1
        cdef Py_ssize_t slot = self._find(k0, k1, NULL) if _split(key, &k0, &k1) else -1
        return NULL if slot < 0 else self.entries[self.index[slot]].value

    # -- the dict API ------------------------------------------------------------------
    def __len__(self):
        return self.live

    def __contains__(self, key):
        return self._get(key) != NULL

    def __getitem__(self, key):
        cdef PyObject* value = self._get(key)
        if value == NULL:
            raise KeyError(key)
        return <object>value

    def __setitem__(self, key, value):
        self.set(key, value)

    def __delitem__(self, key):
        if self.take(key) is None:
            raise KeyError(key)

    def get(self, key, default=None):
        cdef PyObject* value = self._get(key)
        return default if value == NULL else <object>value

    def pop(self, key, *default):
        value = self.take(key)
        if value is not None:
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def clear(self):
        cdef Py_ssize_t i
        held = self.values()  # the messages go once the table is empty and consistent
        for i in range(self.first, self.used):
            Py_XDECREF(self.entries[i].value)  # never the last reference: ``held`` has one
            self.entries[i].value = NULL
        self._rebuild(8)
        del held

    cdef list _live(self, bint ids):
        """The live entries' ids (``ids``) or messages, oldest first."""
        cdef list out = []
        cdef nsqpy_entry* e
        cdef Py_ssize_t i
        for i in range(self.first, self.used):
            e = &self.entries[i]
            if e.value != NULL:
                out.append(PyBytes_FromStringAndSize(<char*>&e.k0, 16) if ids else <object>e.value)
        return out

    def values(self):
        return self._live(False)

    def keys(self):
        return self._live(True)

    def items(self):
        return list(zip(self.keys(), self.values()))

    def __iter__(self):
        return iter(self.keys())

    def __eq__(self, other):
        try:
            return dict(self.items()) == dict(other.items())
        except AttributeError:
            return NotImplemented

    def __repr__(self):
        return f"InFlight({dict(self.items())!r})"


MutableMapping.register(InFlight)


cdef inline int _to_run(object item, object in_flight, list run, object now,
                        object deadline) except -1:
    """A message of a run: in flight from ``now`` until ``deadline`` (fresh entries are made
    into messages, requeued messages delivered again), then appended to ``run``."""
    if PyTuple_Check(item):
        msg = _delivered(<tuple>item, now, deadline)
        msg_id = (<tuple>item)[0]  # its id, without looking it up on the message
    else:
        msg = item
        msg_id = _redelivered(msg, now, deadline)
    if type(in_flight) is InFlight:
        (<InFlight>in_flight).set(msg_id, msg)
    else:
        in_flight[msg_id] = msg
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
    cdef object in_flight
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
    in_flight = client.in_flight
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


#: How far ahead of the FIN at hand ``finish_many`` asks for a message's id and body.
cdef Py_ssize_t _AHEAD = 4


cdef inline void _prefetch_slots(PyObject* msg) noexcept:
    """Ask the CPU for a message's id and body, which finishing it releases."""
    if msg == NULL or not _DIRECT or <PyTypeObject*>msg.ob_type != <PyTypeObject*>MessageType:
        return
    cdef PyObject* slot = (<PyObject**>((<char*>msg) + _ID))[0]
    if slot != NULL:
        nsqpy_prefetch(slot)
    slot = (<PyObject**>((<char*>msg) + _BODY))[0]
    if slot != NULL:
        nsqpy_prefetch(slot)


def finish_many(channel, client, list ids, double now):
    """``Channel.finish_many``: FIN a batch; ``(id, reason)`` for each that failed."""
    in_flight = client.in_flight
    cdef bint table = type(in_flight) is InFlight
    if table:
        (<InFlight>in_flight).prefetch(len(ids))
    cdef list errors = []
    cdef list tokens = []
    cdef Py_ssize_t done = 0
    e2e = channel.e2e
    wall = channel.wall_ns() if e2e is not None else 0
    for msg_id in ids:
        if table:
            _prefetch_slots((<InFlight>in_flight).ahead(_AHEAD))
            msg = (<InFlight>in_flight).take(msg_id)
        else:
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
