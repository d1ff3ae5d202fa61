# C types for models/network/fairshare.py when setup.py compiles it (Cython, pure-Python mode): links and
# jobs are C classes (a re-allocation reads and writes every job's fields), the arrays are typed views
# (array('d'), array('q') 64-bit, array('b')), the rounds and heaps run on C doubles and integers.
import cython

cdef double INF


cdef class Link:
    cdef public object name, jobs, occupant, fabric
    cdef public double capacity
    cdef public long long idx


cdef class Job:
    cdef public list links, lidx
    cdef public double work, weight, max_rate, started
    cdef public object done, tag, fabric
    cdef public tuple kept


cpdef double due(double rate, double remaining, double now)

@cython.locals(j=cython.Py_ssize_t, t=cython.longlong, x=cython.longlong, r=cython.double)
cpdef advance(double[::1] rem, double[::1] rate, long long[::1] lk, long long[::1] off, double[::1] used, double dt)

@cython.locals(j=cython.Py_ssize_t, f=cython.double, nxt=cython.double)
cpdef double finishes(double[::1] rate, double[::1] rem, double[::1] fin, double now) except? -1.0

@cython.locals(j=cython.Py_ssize_t)
cpdef list due_by(double[::1] fin, double until)

@cython.locals(j=cython.Py_ssize_t)
cpdef shift(long long[::1] off, Py_ssize_t i, long long d)

cpdef fair_share(double[::1] cap, long long[::1] lk, long long[::1] off, double[::1] weight,
                 double[::1] max_rate, double[::1] rate, double[::1] peak)


cdef class Filling:
    cdef double[::1] cap, weight, max_rate, rate, left, wsum, lvl, cv
    cdef long long[::1] lk, off, crossed, head, tail, cj, ct, mark, touched, heap, at, cjob
    cdef signed char[::1] exact, frozen
    cdef Py_ssize_t n, k, hn, cn, nd
    cdef long long rnd

    cpdef room(self, Py_ssize_t m, Py_ssize_t nt, Py_ssize_t n, bint fresh=*)

    cpdef share(self, double[::1] cap, long long[::1] lk, long long[::1] off, double[::1] weight,
                double[::1] max_rate, double[::1] rate, double[::1] peak)

    @cython.locals(n=cython.Py_ssize_t, m=cython.Py_ssize_t, x=cython.Py_ssize_t, j=cython.Py_ssize_t)
    cdef setup(self, double[::1] cap, long long[::1] lk, long long[::1] off, double[::1] weight,
               double[::1] max_rate, double[::1] rate)

    @cython.locals(lk=cython.longlong[::1], off=cython.longlong[::1], head=cython.longlong[::1],
                   tail=cython.longlong[::1], cnt=cython.longlong[::1], wsum=cython.double[::1],
                   k=cython.Py_ssize_t, t=cython.longlong, x=cython.longlong, i=cython.Py_ssize_t,
                   pos=cython.longlong, j=cython.Py_ssize_t, e=cython.longlong, w=cython.double)
    cdef void group(self) noexcept

    @cython.locals(i=cython.Py_ssize_t, x=cython.longlong, j=cython.Py_ssize_t, c=cython.double,
                   cn=cython.Py_ssize_t)
    cdef void heaps(self) noexcept

    @cython.locals(n_pend=cython.Py_ssize_t, first=cython.Py_ssize_t, best=cython.double,
                   best_link=cython.longlong, cap_at=cython.longlong, cap_lvl=cython.double,
                   e=cython.longlong, j=cython.longlong)
    cpdef run(self)

    @cython.locals(x=cython.longlong, s=cython.double, w=cython.longlong, h=cython.longlong,
                   e=cython.longlong, j=cython.longlong)
    cdef bint tightest(self) noexcept

    @cython.locals(r=cython.double, t=cython.longlong, x=cython.longlong, y=cython.double)
    cdef void freeze(self, long long j, double level) noexcept

    @cython.locals(i=cython.Py_ssize_t, x=cython.longlong, h=cython.longlong)
    cdef void rebound(self) noexcept

    @cython.locals(load=cython.double[::1], lk=cython.longlong[::1], off=cython.longlong[::1],
                   i=cython.Py_ssize_t, j=cython.Py_ssize_t, t=cython.longlong, x=cython.longlong, y=cython.double)
    cpdef peaks(self, double[::1] peak)

    @cython.locals(x=cython.longlong, y=cython.longlong)
    cdef bint less(self, Py_ssize_t a, Py_ssize_t b) noexcept

    @cython.locals(x=cython.longlong, y=cython.longlong)
    cdef void swap(self, Py_ssize_t a, Py_ssize_t b) noexcept

    @cython.locals(c=cython.Py_ssize_t)
    cdef void down(self, Py_ssize_t i) noexcept

    @cython.locals(p=cython.Py_ssize_t)
    cdef void up(self, Py_ssize_t i) noexcept

    @cython.locals(i=cython.Py_ssize_t, y=cython.longlong)
    cdef void remove(self, long long x) noexcept

    @cython.locals(cv=cython.double[::1], cj=cython.longlong[::1], cn=cython.Py_ssize_t, c=cython.Py_ssize_t)
    cdef void cdown(self, Py_ssize_t i) noexcept
