# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``frames`` (``py_frame``, ``py_bad_size``): one pass over a batch of
records, one copy of each into the framed buffer. Records must be ``bytes``."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject
from libc.string cimport memcpy

cdef extern from "Python.h":
    bint PyBytes_Check(PyObject*)


cdef enum:
    PREFIX = 4


cdef inline Py_ssize_t _size(list records, Py_ssize_t i) except -1:
    cdef PyObject* item = PyList_GET_ITEM(records, i)
    if not PyBytes_Check(item):
        raise TypeError(f"a disk record must be bytes, not {type(<object>item).__name__}")
    return PyBytes_GET_SIZE(<object>item)


def frame(list records not None, Py_ssize_t start, Py_ssize_t pos, Py_ssize_t limit,
          bint want_starts):
    cdef Py_ssize_t n = PyList_GET_SIZE(records)
    cdef Py_ssize_t end = pos
    cdef Py_ssize_t i, size, count = 0, total = 0
    if start < 0:
        raise ValueError("start must not be negative")
    for i in range(start, n):
        size = _size(records, i)
        if end > 0 and end + PREFIX + size > limit:
            break
        end += PREFIX + size
        total += PREFIX + size
        count += 1
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* p = PyBytes_AS_STRING(out)
    cdef list starts = [] if want_starts else None
    cdef Py_ssize_t at = pos
    cdef object item
    for i in range(start, start + count):
        item = <object>PyList_GET_ITEM(records, i)
        size = PyBytes_GET_SIZE(item)
        p[0] = <char>((size >> 24) & 0xFF)
        p[1] = <char>((size >> 16) & 0xFF)
        p[2] = <char>((size >> 8) & 0xFF)
        p[3] = <char>(size & 0xFF)
        memcpy(p + PREFIX, PyBytes_AS_STRING(item), size)
        p += PREFIX + size
        if want_starts:
            starts.append(at)
        at += PREFIX + size
    return out, count, starts


def bad_size(list records not None, Py_ssize_t low, Py_ssize_t high):
    cdef Py_ssize_t i, size
    for i in range(PyList_GET_SIZE(records)):
        size = _size(records, i)
        if size < low or size > high:
            return size
    return -1
