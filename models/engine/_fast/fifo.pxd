# C types for models/engine/_fast/fifo.py when setup.py compiles it (Cython, pure-Python mode): RingFifo's ids are a
# typed view of its array('q'), indexed as C integers (fifo.py's first line turns bounds checks off:
# every index is masked into the ring). The serving core's calls on a typed RingFifo are C calls.
import cython


cdef class RingFifo:
    cdef readonly object a
    cdef readonly long long h, n
    cdef long long _m
    cdef long long[:] _a

    cdef _room(self)

    cpdef push(self, long long x)

    cpdef push_front(self, long long x)

    cpdef long long pop_front(self) except? -1

    cpdef long long at(self, long long j) except? -1

    cpdef drop(self, long long k)

    @cython.locals(a=cython.longlong[:], h=cython.longlong, m=cython.longlong, n=cython.longlong, j=cython.longlong)
    cpdef remove(self, long long x)

    cpdef load(self, object ids)
