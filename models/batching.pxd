# C types for models/batching.py when setup.py compiles it (Cython, pure-Python mode): the closed forms
# the serving core calls once per step become C functions (models/serving.pxd cimports them).
# _guess stays Python objects: C's floor(t / h) is not Python's float t // h (1.0 // 0.1 is 9.0), and
# its int may exceed 64 bits.
import cython

cpdef tuple compose(double g, double h, double f, bint sequential)

@cython.locals(x=cython.double, m=cython.longlong)
cpdef long long host_bound_count(long long k, double g0, double dg, double h) except? -1

@cython.locals(x=cython.double, m=cython.longlong)
cpdef double run_time(long long k, double g0, double dg, double h) except? -1.0

cpdef object _guess(object t, object g0, object dg, object h)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef tuple _search(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef tuple reach(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef tuple before(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef tuple split(double t, double g0, double dg, double h, long long kmax)
