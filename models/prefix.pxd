# C types for models/prefix.py when setup.py compiles it (Cython, pure-Python mode): with a prefix cache an
# engine asks it at every admission and tells it at every prefill and finish (models/serving.py), so its
# loops run compiled; the entries stay an OrderedDict of the block hashes.
import cython


cdef class PrefixCache:
    cdef public long long capacity, block_tokens, hit_tokens, prompt_tokens
    cdef public object entries
    cdef public dict pins, held

    @cython.locals(k=cython.longlong, entries=object)
    cpdef long long lookup(self, object hashes) except? -1

    @cython.locals(pins=dict)
    cpdef acquire(self, object rid, object hashes, long long k)

    @cython.locals(pins=dict, left=cython.longlong)
    cpdef release(self, object rid)

    @cython.locals(pins=dict, cap=cython.Py_ssize_t)
    cpdef insert(self, object hashes)

    cpdef double hit_rate(self)
