# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``unfinished.PyUnfinished``: one byte per token, 1 while unfinished,
from the oldest token that may be unfinished to the newest, in a buffer of its own.

Adding a run is a ``memset``; finishing one is a pass over the list that clears bytes; the
oldest is the first byte still set, and the scan for it moves the buffer's head past the
cleared ones so that no byte is looked at twice. The region is moved to the buffer's start
(and the buffer shrunk when it is mostly empty) only when a run would not fit after it.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.string cimport memchr, memmove, memset


cdef enum:
    MIN_CAPACITY = 65536


cdef class Unfinished:
    cdef unsigned char* buf
    cdef Py_ssize_t cap
    cdef Py_ssize_t head  # buf[head] is token `first`; bytes before head are not in use
    cdef Py_ssize_t tail  # one past the last byte in use
    cdef long long first
    cdef long long end  # one past the highest token added
    cdef Py_ssize_t count

    def __cinit__(self):
        self.buf = NULL
        self.cap = self.head = self.tail = self.count = 0
        self.first = self.end = 0

    def __dealloc__(self):
        PyMem_Free(self.buf)

    def add_range(self, long long lo, long long hi):
        cdef Py_ssize_t n, gap
        if lo < self.end:
            raise ValueError(f"token {lo} is not above every token added ({self.end - 1})")
        if hi <= lo:
            return
        n = <Py_ssize_t>(hi - lo)
        if self.count == 0:  # nothing unfinished: start over at lo
            self.head = self.tail = 0
            self.first = lo
            gap = 0
        else:
            gap = <Py_ssize_t>(lo - (self.first + (self.tail - self.head)))
        self._room(gap + n)
        memset(self.buf + self.tail, 0, gap)
        memset(self.buf + self.tail + gap, 1, n)
        self.tail += gap + n
        self.count += n
        self.end = hi

    cdef int _room(self, Py_ssize_t need) except -1:
        """Make room for ``need`` bytes after ``tail``."""
        cdef Py_ssize_t used, cap
        cdef unsigned char* grown
        if self.tail + need <= self.cap:
            return 0
        self._skip_finished()
        used = self.tail - self.head
        if self.head:
            memmove(self.buf, self.buf + self.head, used)
            self.head, self.tail = 0, used
        cap = self.cap
        if used + need > cap or cap > MIN_CAPACITY and (used + need) * 4 < cap:
            cap = max(2 * (used + need), MIN_CAPACITY)
            grown = <unsigned char*>PyMem_Realloc(self.buf, cap)
            if grown == NULL:
                raise MemoryError()
            self.buf, self.cap = grown, cap
        return 0

    cdef void _skip_finished(self) noexcept:
        """Move ``head`` to the oldest unfinished token (to ``tail`` when there is none)."""
        cdef const unsigned char* hit
        if self.count == 0:
            self.first += self.tail - self.head
            self.head = self.tail
            return
        hit = <const unsigned char*>memchr(self.buf + self.head, 1, self.tail - self.head)
        self.first += hit - (self.buf + self.head)
        self.head = hit - self.buf

    cdef inline bint _clear(self, long long token) noexcept:
        cdef long long i = token - self.first
        if i < 0 or i >= self.tail - self.head or not self.buf[self.head + i]:
            return False
        self.buf[self.head + i] = 0
        self.count -= 1
        return True

    def discard(self, long long token):
        return self._clear(token)

    def discard_many(self, list tokens not None):
        cdef Py_ssize_t i, n = PyList_GET_SIZE(tokens)
        cdef bint changed = False
        for i in range(n):
            if self._clear(<long long><object>PyList_GET_ITEM(tokens, i)):
                changed = True
        return changed

    def oldest(self):
        if self.count == 0:
            raise ValueError("no unfinished token")
        self._skip_finished()
        return self.first

    def clear(self):
        self.count = 0
        self.head = self.tail = 0

    def __len__(self):
        return self.count
