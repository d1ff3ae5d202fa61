# C types for models/engine/batching.py when setup.py compiles it (Cython, pure-Python mode): the closed forms
# the serving core calls once per step become C functions (models/engine/_fast/serving.pxd cimports them).
# _guess is only where the search starts (any start gives the same answer), in floats, clamped to kmax.
import cython

cpdef tuple compose(double g, double h, double f, bint sequential)

@cython.locals(x=cython.double, m=cython.longlong)
cpdef long long host_bound_count(long long k, double g0, double dg, double h) except? -1

@cython.locals(x=cython.double, m=cython.longlong)
cpdef double run_time(long long k, double g0, double dg, double h) except? -1.0

@cython.locals(m_all=cython.longlong, x=cython.double, t2=cython.double, base=cython.double, bq=cython.double)
cpdef long long _guess(double t, double g0, double dg, double h, long long kmax) except? -1

@cython.locals(k=cython.longlong, r=cython.double, up=cython.double)
cpdef (long long, double, double) _search(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double, up=cython.double)
cpdef (long long, double) reach(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef (long long, double) before(double t, double g0, double dg, double h, long long kmax)

@cython.locals(k=cython.longlong, r=cython.double)
cpdef (long long, double) split(double t, double g0, double dg, double h, long long kmax)
