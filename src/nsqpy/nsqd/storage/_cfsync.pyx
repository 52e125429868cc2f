# cython: language_level=3, boundscheck=False, wraparound=False
"""The compiled twin of ``fsyncers.py_serve``: a worker that never takes the GIL.

It waits for a ring of the doorbell, reads a request from the work pipe, syncs the
descriptors it names and writes the answer to the done pipe, all inside one ``nogil`` block: a
commit round's wait no longer includes two GIL handovers from the busy event-loop thread. The
protocol is in ``fsyncers``' docstring.
"""

from libc.errno cimport EINTR, EIO, errno
from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.stdint cimport int32_t, uint64_t


cdef extern from "unistd.h" nogil:
    ssize_t read(int fd, void* buf, size_t count)
    ssize_t write(int fd, const void* buf, size_t count)
    int fdatasync(int fd)
    int fsync(int fd)


cdef enum:
    REQUEST_INTS = 16


def serve(int work, int done, int bell, bytearray ready not None):
    """Serve requests from ``work``, one per ring of ``bell``, until a stop request (id 0)
    or EOF; ``ready[0]`` is set to 1 after each answer is written."""
    cdef int32_t request[REQUEST_INTS]
    cdef uint64_t ring
    cdef int32_t answer[2]
    cdef ssize_t got
    cdef int i, count, fd, rc, failed
    if len(ready) < 1:
        raise ValueError("ready needs one byte")
    # the worker keeps a reference (the caller's); a bytearray's buffer moves only on resize
    cdef volatile char* flag = PyByteArray_AS_STRING(ready)
    with nogil:
        while True:
            got = read(bell, &ring, sizeof(ring))
            if got < 0 and errno == EINTR:
                continue
            if got != sizeof(ring):
                break
            got = read(work, request, sizeof(request))
            while got < 0 and errno == EINTR:
                got = read(work, request, sizeof(request))
            if got != sizeof(request) or request[0] == 0:
                break
            count = request[1]
            if count > REQUEST_INTS - 2:
                count = REQUEST_INTS - 2
            failed = 0
            for i in range(count):
                fd = request[2 + i]
                if fd >= 0:
                    rc = fdatasync(fd)
                else:
                    rc = fsync(-fd - 1)
                if rc != 0 and failed == 0:
                    failed = errno if errno != 0 else EIO
            answer[0] = request[0]
            answer[1] = failed
            while write(done, answer, sizeof(answer)) < 0 and errno == EINTR:
                pass
            flag[0] = 1  # after the write: once the loop sees it set, the answer is in the pipe
