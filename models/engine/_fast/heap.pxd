# C types for models/engine/heap.py when setup.py compiles it (Cython, pure-Python mode): KeyHeap's keys are a
# typed view of an array('q') (64-bit: they are below 2**63, models.engine.serving `key`), sifted as C integers
# (manifest.py's DIRECTIVES turn wraparound off: the sifts index only below n).
import cython

cdef long long MASK


cdef class KeyHeap:
    cdef public Py_ssize_t n
    cdef long long[:] _a
    cdef Py_ssize_t _cap

    @cython.locals(j=cython.Py_ssize_t)
    cdef _room(self)

    cpdef push(self, long long x)

    @cython.locals(a=cython.longlong[:], last=cython.longlong, top=cython.longlong)
    cpdef long long pop(self) except? -1

    cpdef long long top(self) except? -1

    cpdef long long pop_due(self, long long t) except? -2

    cpdef load(self, object keys)

    cpdef push_raw(self, long long x)

    @cython.locals(a=cython.longlong[:], n=cython.Py_ssize_t, j=cython.Py_ssize_t, i=cython.Py_ssize_t,
                   x=cython.longlong)
    cpdef long long take(self, long long rid) except? -1


@cython.locals(item=cython.longlong, parent=cython.longlong, parent_pos=cython.Py_ssize_t)
cdef void _siftdown(long long[:] heap, Py_ssize_t start, Py_ssize_t pos) noexcept

@cython.locals(start=cython.Py_ssize_t, item=cython.longlong, child=cython.Py_ssize_t, right=cython.Py_ssize_t)
cdef void _siftup(long long[:] heap, Py_ssize_t pos, Py_ssize_t end) noexcept
