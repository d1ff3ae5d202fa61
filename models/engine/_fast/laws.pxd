# C types for models/engine/laws.py when setup.py compiles it (Cython, pure-Python mode): the engine calls its
# law once per step (models/engine/_fast/serving.pxd types EngineState.law as LatencyLaw), so the laws are C
# classes and their methods C calls through the class's table; a law written in Python (a subclass)
# overrides them as usual, at a Python call's cost.
import cython


cdef class LatencyLaw:
    cdef public bint line, detail

    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    cpdef (double, double) decode_line(self, long long n_dec, long long sum_ctx)

    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0


cdef class LinearLaw(LatencyLaw):
    cdef public double a, b, c, d

    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    cpdef (double, double) decode_line(self, long long n_dec, long long sum_ctx)

    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0


cdef class AttentionLaw(LinearLaw):
    cdef public double e

    @cython.locals(g=cython.double)
    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    @cython.locals(g=cython.double)
    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0


cdef class TableLaw(LatencyLaw):
    cdef public object batches, contexts, decode, tokens, prefill
    cdef public double p0
    cdef double[:] _b, _x, _d, _t, _p

    @cython.locals(k=cython.Py_ssize_t)
    cpdef double prefill_time(self, double pf) except? -1.0

    @cython.locals(nx=cython.Py_ssize_t, j=cython.Py_ssize_t, t=cython.double)
    cdef double _row(self, Py_ssize_t i, double x) except? -1.0

    @cython.locals(i=cython.Py_ssize_t, t=cython.double)
    cpdef double decode_time(self, double batch, double context) except? -1.0

    @cython.locals(rows=cython.longlong, g=cython.double)
    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0


cdef double lerp(double y0, double y1, double t) noexcept

@cython.locals(lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t, k=cython.Py_ssize_t,
               last=cython.Py_ssize_t)
cdef Py_ssize_t _cell(double[:] xs, double x) except? -1
