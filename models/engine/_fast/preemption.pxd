# C types for models/engine/preemption.py when setup.py compiles it (Cython, pure-Python mode): the engine
# calls its pool's mode at every preemption and, while requests are parked, before every admission; the
# modes are C classes with C calls into the engine's state (serving.pxd) and pool (kv.pxd).
import cython

from .kv cimport KVPool
from .serving cimport EngineState


cdef class Preemption:
    cdef public dict parked
    cdef public bint copies

    cpdef park(self, EngineState st, long long rid, long long ctx, long long left)

    cpdef (long long, long long) resume(self, EngineState st, long long t, long long n_dec, long long sum_ctx)


cdef class Recompute(Preemption):
    cpdef park(self, EngineState st, long long rid, long long ctx, long long left)


cdef class Swap(Preemption):
    cpdef park(self, EngineState st, long long rid, long long ctx, long long left)

    @cython.locals(kv=KVPool, room=cython.longlong, ctx=cython.longlong, left=cython.longlong, nb=cython.longlong,
                   phase=cython.longlong, cross=cython.longlong, keep=cython.longlong)
    cpdef (long long, long long) resume(self, EngineState st, long long t, long long n_dec, long long sum_ctx)
