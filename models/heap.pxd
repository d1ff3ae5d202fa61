# C types for models/heap.py when setup.py compiles it (Cython, pure-Python mode): the keys are compared
# as 64-bit integers (they are below 2**63: models.serving `key`), the list keeps the Python objects
# (heap.py's first line turns bounds checks off: the sifts index only within the list).
import cython

cpdef heappush(list heap, object item)

cpdef object heappop(list heap)

@cython.locals(i=cython.Py_ssize_t)
cpdef heapify(list heap)

@cython.locals(v=cython.longlong, pv=cython.longlong, parent_pos=cython.Py_ssize_t)
cdef void _siftdown(list heap, Py_ssize_t start, Py_ssize_t pos)

@cython.locals(end=cython.Py_ssize_t, start=cython.Py_ssize_t, child=cython.Py_ssize_t, right=cython.Py_ssize_t,
               cv=cython.longlong, rv=cython.longlong)
cdef void _siftup(list heap, Py_ssize_t pos)
