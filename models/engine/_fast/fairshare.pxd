# C types for models/network/fairshare.py when setup.py compiles it (Cython, pure-Python mode): the arrays are
# typed views (array('d') and array('q'), 64-bit), the rounds run on C doubles and integers.
import cython

cdef double INF


@cython.locals(n=cython.Py_ssize_t, m=cython.Py_ssize_t, left=cython.double[:], wsum=cython.double[:],
               stamp=cython.longlong[:], order=cython.longlong[:], crossed=cython.longlong[:],
               pend=cython.longlong[:], n_pend=cython.Py_ssize_t, rnd=cython.longlong,
               n_links=cython.Py_ssize_t, k=cython.Py_ssize_t, i=cython.Py_ssize_t, best=cython.double,
               best_link=cython.longlong, cap_at=cython.Py_ssize_t, cap_lvl=cython.double)
cpdef fair_share(double[:] cap, long long[:] lk, long long[:] off, double[:] weight, double[:] max_rate,
                 double[:] rate, double[:] peak)

# the rounds' steps: C functions on the same views (no Python call; a division by 0 still raises)
@cython.locals(k=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.longlong, t=cython.longlong, x=cython.longlong,
               w=cython.double)
cdef Py_ssize_t _weigh(long long[:] lk, long long[:] off, double[:] weight, long long[:] pend, Py_ssize_t n_pend,
                       long long rnd, long long[:] stamp, double[:] wsum, long long[:] order) noexcept

@cython.locals(best=cython.double, best_link=cython.longlong, i=cython.Py_ssize_t, x=cython.longlong,
               lvl=cython.double)
cdef (double, long long) _tightest_link(double[:] left, double[:] wsum, long long[:] order, Py_ssize_t k)

@cython.locals(cap_at=cython.Py_ssize_t, cap_lvl=cython.double, i=cython.Py_ssize_t, j=cython.longlong,
               c=cython.double)
cdef (Py_ssize_t, double) _tightest_cap(double[:] weight, double[:] max_rate, long long[:] pend,
                                        Py_ssize_t n_pend)

@cython.locals(kept=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.longlong, hit=cython.bint, t=cython.longlong,
               x=cython.longlong, r=cython.double, y=cython.double)
cdef Py_ssize_t _freeze(long long[:] lk, long long[:] off, double[:] weight, long long[:] pend, Py_ssize_t n_pend,
                        double[:] left, double[:] rate, double best, long long best_link, Py_ssize_t cap_at,
                        double cap_lvl) noexcept

@cython.locals(i=cython.Py_ssize_t, j=cython.Py_ssize_t, t=cython.longlong, x=cython.longlong, y=cython.double)
cdef void _loads(double[:] cap, long long[:] lk, long long[:] off, double[:] rate, double[:] peak, double[:] wsum,
                 long long[:] crossed, Py_ssize_t n_links, Py_ssize_t n)
