# C types for models/engine/kv.py when setup.py compiles it (Cython, pure-Python mode; the .py stays the one
# source of the logic). With a pool an engine books its blocks at every step (`grow`, `safe_iters`,
# `make_room` in models/engine/serving.py), so the pool's counters are C fields and those loops C loops.
# Block counts, iteration numbers and their sums are 64-bit (an engine's sum_used, iterations x blocks,
# stays far below 2**63); `%` and `//` keep Python's semantics (cdivision is off).
import cython


cpdef long long blocks(long long tokens, long long bs) except? -1

@cython.locals(j=cython.Py_ssize_t)
cpdef grown(object a, long long more)

from .preemption cimport Preemption  # (after `blocks`: preemption.pxd cimports serving.pxd, which cimports it)


cdef class KVPool:
    cdef public long long bs, pool, reserved, cap, wm, used, preemptions, rejected, sum_used, sum_cap, need_now
    cdef public long long hold, copy, copied
    cdef long long[:] _cnt, _run_nxt, _run_prv, _share
    cdef public dict orig
    cdef public Preemption mode
    cdef public long long n_running
    cdef public bint holding, held
    cdef public double peak

    cpdef room(self, long long n)

    @cython.locals(s=cython.longlong, last=cython.longlong)
    cpdef run_add(self, long long rid)

    @cython.locals(s=cython.longlong, p=cython.longlong, q=cython.longlong)
    cpdef run_del(self, long long rid)

    cpdef long long last_running(self) except? -2

    cpdef long long blocks(self, long long tokens) except? -1

    cpdef enter(self, long long x)

    @cython.locals(p=cython.longlong)
    cpdef long long leave(self, long long x) except? -1

    cpdef long long crossing(self, long long t) except? -1

    cpdef set_share(self, long long rid, long long k)

    cpdef free(self, long long rid, long long nb)

    cpdef apply_hold(self)

    cpdef bint too_long(self, long long total, long long prompt) except -1

    @cython.locals(x=cython.longlong, s=cython.longlong, bs=cython.longlong)
    cpdef long long _partial(self, long long p0, long long j) except? -1

    @cython.locals(q=cython.longlong, r=cython.longlong)
    cpdef long long need(self, long long m, long long t0, long long n_dec) except? -1

    @cython.locals(free=cython.longlong, bs=cython.longlong, q=cython.longlong, r=cython.longlong,
                   p=cython.longlong, j=cython.longlong, s=cython.longlong)
    cpdef long long safe_iters(self, long long t0, long long n_dec) except? -1

    @cython.locals(used=cython.longlong, bs=cython.longlong, p=cython.longlong, s=cython.longlong,
                   total=cython.longlong, x=cython.longlong, acc=cython.longlong, accr=cython.longlong,
                   q=cython.longlong, r=cython.longlong, pr=cython.longlong, u=cython.double)
    cpdef grow(self, long long k, long long t0, long long n_dec)
