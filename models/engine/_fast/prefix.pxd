# C types for models/engine/prefix.py when setup.py compiles it (Cython, pure-Python mode): with a prefix cache an
# engine asks it at every admission and tells it at every prefill and finish (models/engine/serving.py), so its
# LRU list and hash table are C arrays (typed views of arrays('q')) and its loops C loops.
# Hashes are 64-bit; the table's hash is unsigned 64-bit arithmetic, which wraps as the .py's masks do.
import cython

cdef unsigned long long M64, GOLDEN


cdef class PrefixCache:
    cdef public long long capacity, block_tokens, hit_tokens, prompt_tokens, size, bits, epoch
    cdef long long[:] _key, _pin, _prv, _nxt, _tab

    @cython.locals(more=cython.longlong)
    cdef _slots(self, long long n)

    @cython.locals(nxt=cython.longlong[:], s=cython.longlong)
    cdef _table(self, long long bits)

    @cython.locals(want=cython.longlong, bits=cython.longlong)
    cdef _room(self, long long m)

    cdef inline unsigned long long _home(self, long long h) noexcept

    @cython.locals(mask=cython.longlong, j=cython.longlong, s=cython.longlong)
    cdef long long _find(self, long long h) except -1

    @cython.locals(mask=cython.longlong, j=cython.longlong)
    cdef void _put(self, long long h, long long s) except *

    @cython.locals(mask=cython.longlong, i=cython.longlong, j=cython.longlong, s=cython.longlong,
                   home=cython.longlong)
    cdef void _drop(self, long long h) except *

    @cython.locals(k=cython.longlong, h=cython.longlong)
    cpdef long long lookup(self, object hashes) except? -1

    @cython.locals(last=cython.longlong, p=cython.longlong, q=cython.longlong)
    cdef void _to_end(self, long long s) except *

    @cython.locals(j=cython.longlong, s=cython.longlong)
    cpdef acquire(self, object hashes, long long k)

    @cython.locals(j=cython.longlong)
    cpdef release(self, object hashes, long long k)

    @cython.locals(h=cython.longlong, s=cython.longlong, p=cython.longlong, q=cython.longlong, last=cython.longlong)
    cpdef insert(self, object hashes)

    cpdef double hit_rate(self)
