# C types for models/network/fairshare.py when setup.py compiles it (Cython, pure-Python mode): the arrays are
# typed views (array('d') and array('q'), 64-bit), the rounds run on C doubles and integers.
import cython

cdef double INF


@cython.locals(n=cython.Py_ssize_t, m=cython.Py_ssize_t, left=cython.double[:], wsum=cython.double[:],
               stamp=cython.longlong[:], order=cython.longlong[:], crossed=cython.longlong[:],
               pend=cython.longlong[:], n_pend=cython.Py_ssize_t, rnd=cython.longlong,
               n_links=cython.Py_ssize_t, k=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.longlong,
               t=cython.longlong, x=cython.longlong, w=cython.double, best=cython.double,
               best_link=cython.longlong, cap_at=cython.Py_ssize_t, cap_lvl=cython.double,
               lvl=cython.double, c=cython.double, kept=cython.Py_ssize_t, hit=cython.bint,
               r=cython.double, y=cython.double)
cpdef fair_share(double[:] cap, long long[:] lk, long long[:] off, double[:] weight, double[:] max_rate,
                 double[:] rate, double[:] peak)
