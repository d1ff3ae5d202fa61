# C types for models/prefix.py when setup.py compiles it (Cython, pure-Python mode): with a prefix cache an
# engine asks it at every admission and tells it at every prefill and finish (models/serving.py), so its
# LRU list is C arrays (typed views of the array('q') fields) and its loops C loops; the hash -> slot
# map stays a dict, and the hashes Python ints (a trace's may be any whole number).
import cython


cdef class PrefixCache:
    cdef public long long capacity, block_tokens, hit_tokens, prompt_tokens, size
    cdef public dict where, mine
    cdef public list key
    cdef public object pin, prv, nxt
    cdef long long[:] _pin, _prv, _nxt

    @cython.locals(k=cython.longlong, where=dict)
    cpdef long long lookup(self, object hashes) except? -1

    @cython.locals(prv=cython.longlong[:], nxt=cython.longlong[:], head=cython.longlong, last=cython.longlong,
                   p=cython.longlong, q=cython.longlong)
    cdef void _to_end(self, long long s) except *

    @cython.locals(where=dict, pin=cython.longlong[:], j=cython.longlong, s=cython.longlong, slots=list)
    cpdef acquire(self, object rid, object hashes, long long k)

    @cython.locals(slots=tuple, pin=cython.longlong[:], s=cython.longlong)
    cpdef release(self, object rid)

    @cython.locals(where=dict, key=list, pin=cython.longlong[:], prv=cython.longlong[:], nxt=cython.longlong[:],
                   head=cython.longlong, s=cython.longlong, p=cython.longlong, q=cython.longlong,
                   last=cython.longlong)
    cpdef insert(self, object hashes)

    cpdef double hit_rate(self)
