# C types for models/engine/fifo.py when setup.py compiles it (Cython, pure-Python mode): RingFifo's ids are a
# typed view of an array('q'), indexed as C integers (manifest.py's DIRECTIVES turn wraparound off:
# every index is masked into the ring). The serving core's calls on a typed RingFifo are C calls.
import cython


cdef class RingFifo:
    cdef readonly long long h, n
    cdef long long _m
    cdef long long[:] _a

    @cython.locals(j=cython.longlong)
    cdef _room(self)

    cpdef push(self, long long x)

    cpdef push_front(self, long long x)

    cpdef long long pop_front(self) except? -1

    cpdef long long at(self, long long j) except? -1

    cpdef drop(self, long long k)

    @cython.locals(a=cython.longlong[:], h=cython.longlong, m=cython.longlong, n=cython.longlong, j=cython.longlong)
    cpdef remove(self, long long x)

    cpdef load(self, object ids)
