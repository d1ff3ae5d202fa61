# C types for models/engine/laws.py when setup.py compiles it (Cython, pure-Python mode): the engine calls its
# law once per step (models/engine/_fast/serving.pxd types EngineState.law as LatencyLaw), so the laws are C
# classes and their methods C calls through the class's table; a law written in Python elsewhere runs
# through Delegate, at a Python call's cost.
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


cdef double lerp(double y0, double y1, double t) noexcept

@cython.locals(a=cython.Py_ssize_t, b=cython.Py_ssize_t, mid=cython.Py_ssize_t, k=cython.Py_ssize_t)
cdef Py_ssize_t _cell(double[:] xs, Py_ssize_t lo, Py_ssize_t hi, double x) except? -1

@cython.locals(k=cython.Py_ssize_t)
cdef double _polyline(double[:] xs, double[:] ys, Py_ssize_t lo, Py_ssize_t hi, double x) except? -1.0


cdef class TableLaw(LatencyLaw):
    cdef public tuple decode, prefill
    cdef public double base
    cdef double[:] _ctx, _bat, _dec, _tok, _pre
    cdef long long[:] _start

    cpdef double prefill_time(self, double tokens) except? -1.0

    cdef double _column(self, Py_ssize_t j, double batch) except? -1.0

    @cython.locals(n=cython.Py_ssize_t, j=cython.Py_ssize_t, t=cython.double)
    cpdef double decode_time(self, double batch, double ctx) except? -1.0

    @cython.locals(rows=cython.longlong, g=cython.double)
    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0


cdef class Delegate(LatencyLaw):
    cdef public object law

    cpdef double step_time(self, long long pf, long long m, long long pairs, long long past, long long n_dec,
                           long long sum_ctx) except? -1.0

    @cython.locals(g0=cython.double, dg=cython.double)
    cpdef (double, double) decode_line(self, long long n_dec, long long sum_ctx)

    cpdef double saturated(self, double batch, double prompt, double output, double prefill) except? -1.0
