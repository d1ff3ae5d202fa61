# C types for models/engine/serving.py when setup.py compiles it (Cython, pure-Python mode; the .py stays the
# one source of the logic, and runs unchanged without Cython). The engine's counters and parameters
# are C fields of EngineState, `Steps.advance` (the loop of `serve` between two SimPy events) and the
# rules it calls are C functions with C locals, and the closed forms are C calls into the compiled
# batching module. Integers are 64-bit (`%` and `//` keep Python's semantics: cdivision is off);
# doubles are computed as CPython does (setup.py: no fused multiply-add).
import cython

from .batching cimport before, compose, reach, run_time, split
from .fifo cimport RingFifo
from .heap cimport KeyHeap
from .kv cimport KVPool, blocks
from .laws cimport LatencyLaw
from .prefix cimport PrefixCache


cpdef double delay_to(double now, double t) except? -1.0


cdef class EngineState:
    cdef public long long max_seqs, budget
    cdef public LatencyLaw law
    cdef public double h, h1, h2, fq, ft
    cdef public bint seq, front
    cdef public long long n
    cdef public object t_arr, prompt, output, admitted, first_token, finish
    cdef public long long next_i
    cdef public RingFifo waiting, prefilling
    cdef public object prefilled
    cdef public KeyHeap fin_heap
    cdef public long long n_dec, sum_ctx, diter, n_finished, contended
    cdef public double now
    cdef public object log, client, tag, gate
    cdef public KVPool kv
    cdef public bint slow
    cdef public object cached, hashes
    cdef public PrefixCache px
    cdef public object skipped, pinned
    cdef public bint start
    cdef public object tape
    cdef public list requeued, resumed
    cdef long long _head, _head_epoch, _head_nb
    cdef (long long, long long, long long) _head_skip
    # typed views of the arrays; the per-step rules below index them as self._x[rid], not through a
    # local: a local view is acquired and released (two atomic instructions) at every call
    cdef double[:] _admitted, _first_token, _finish, _t_arr
    cdef long long[:] _prompt, _output, _prefilled, _skipped, _pinned, _live
    cdef public bint lag, limits, pooled, watch
    cdef public long long max_len, refused, abandoned
    cdef public double patience
    cdef public object live
    cdef public KeyHeap alive

    # rule 1: arrivals, and when the next one is
    @cython.locals(i=cython.longlong, n=cython.longlong, waiting=RingFifo)
    cdef inline long long arrive(self, double now, double seen) except *

    @cython.locals(kv=KVPool)
    cdef inline bint idle(self) except -1

    cdef inline double next_at(self, long long i) except? -1.0

    # the prefill chunks: (m, last, pf), no list (a step's chunks go to the first m of prefilling)
    @cython.locals(m=cython.longlong, take=cython.longlong, rid=cython.longlong, j=cython.longlong,
                   prefilling=RingFifo)
    cdef inline (long long, long long, long long) continuing(self, long long budget)

    @cython.locals(budget0=cython.longlong, budget=cython.longlong, take=cython.longlong, m=cython.longlong,
                   room=cython.longlong, got=cython.longlong, hit=cython.longlong, tok=cython.longlong,
                   rid=cython.longlong, prefilling=RingFifo, waiting=RingFifo)
    cpdef (long long, long long, long long) admit(self, double now, long long n_dec, long long sum_ctx)

    @cython.locals(new=cython.longlong, tokens=cython.longlong, pf=cython.longlong,
                   take=cython.longlong, got=cython.longlong, h=cython.double, rid=cython.longlong,
                   j=cython.longlong, prefilling=RingFifo)
    cpdef (double, double) host_work(self, long long m, long long last, long long n_dec)

    @cython.locals(pairs=cython.longlong, past=cython.longlong, take=cython.longlong, got=cython.longlong,
                   rid=cython.longlong, j=cython.longlong, prefilling=RingFifo)
    cpdef (long long, long long) chunks(self, long long m, long long last)

    @cython.locals(completed=cython.longlong, got=cython.longlong, j=cython.longlong,
                   out=cython.longlong, due=cython.longlong, rid=cython.longlong, start=cython.bint,
                   prefilling=RingFifo, kv=KVPool)
    cpdef (long long, long long) first_tokens(self, long long m, long long last, double end, long long diter,
                                              long long n_dec, long long sum_ctx)

    @cython.locals(x=cython.longlong, due=cython.longlong, rid=cython.longlong, kv=KVPool, px=PrefixCache,
                   fin_heap=KeyHeap)
    cpdef finish_due(self, double end, long long diter, long long n_dec, long long sum_ctx, list done)

    @cython.locals(x=cython.longlong, k=cython.longlong, safe=cython.longlong)
    cdef inline long long kv_run(self, long long t, long long n_dec) except *

    @cython.locals(t_arr=cython.double[:], admitted=cython.double[:], finish=cython.double[:], n=cython.longlong,
                   done=cython.longlong, j=cython.longlong)
    cpdef (long long, long long, long long, long long) tally(self, double t, long long seen, long long adm,
                                                             long long fin)

    # cached prompt tokens (a prefix cache: models.engine.prefix): at every admission and prefill
    @cython.locals(p=cython.longlong, given=cython.longlong, px=PrefixCache, k=cython.longlong, kv=KVPool,
                   own=cython.longlong, tok=cython.longlong)
    cpdef (long long, long long, long long) skip(self, long long rid)

    @cython.locals(px=PrefixCache, kv=KVPool)
    cpdef take_cached(self, long long rid, bint first, long long got, long long k, long long tok)

    @cython.locals(px=PrefixCache, k=cython.longlong, full=cython.longlong, a=cython.longlong)
    cpdef prefill_done(self, long long rid)

    @cython.locals(k=cython.longlong)
    cpdef unpin(self, long long rid)

    # with a KV pool (models.engine.kv): every step books its blocks
    @cython.locals(kv=KVPool, total=cython.longlong)
    cpdef release(self, long long rid, long long due)

    @cython.locals(kv=KVPool, need=cython.longlong)
    cpdef (long long, long long) make_room(self, long long t, long long n_dec, long long sum_ctx)

    @cython.locals(kv=KVPool, due=cython.longlong, total=cython.longlong, ctx=cython.longlong)
    cpdef (long long, long long, long long) _preempt(self, long long rid, long long t, long long n_dec,
                                                    long long sum_ctx, long long need)

    @cython.locals(kv=KVPool, budget0=cython.longlong, budget=cython.longlong, take=cython.longlong,
                   room=cython.longlong, got=cython.longlong, free=cython.longlong, p=cython.longlong,
                   nb=cython.longlong, rid=cython.longlong, first=cython.bint, start=cython.bint, m=cython.longlong,
                   hit=cython.longlong, tok=cython.longlong, epoch=cython.longlong, hf=cython.longlong,
                   prefilling=RingFifo, waiting=RingFifo)
    cpdef (long long, long long, long long) admit_kv(self, double now, long long n_dec, long long sum_ctx)

    @cython.locals(kv=KVPool, got=cython.longlong, hit=cython.longlong, tok=cython.longlong)
    cpdef long long asks(self, long long rid, long long p, long long epoch) except? -2

    # vLLM V1's limits (async scheduling, max_model_len, the client's time-out) and the prefix cache in the pool
    @cython.locals(px=PrefixCache, kv=KVPool)
    cdef _v1(self, bint lag, long long max_len, double patience, bint pooled)

    cdef int _run(self, long long rid) except -1

    @cython.locals(kv=KVPool)
    cpdef bint _gone(self, long long rid, double now) except? True

    @cython.locals(waiting=RingFifo)
    cpdef expire(self, double now)

    @cython.locals(alive=KeyHeap, limit=cython.double, rid=cython.longlong)
    cpdef (long long, long long) give_up(self, double now, long long t, long long n_dec, long long sum_ctx)

    @cython.locals(kv=KVPool, due=cython.longlong, total=cython.longlong, ctx=cython.longlong)
    cpdef (long long, long long) _abort(self, long long rid, long long t, long long n_dec, long long sum_ctx)

    @cython.locals(alive=KeyHeap, t=cython.double, w=cython.double)
    cpdef double next_deadline(self) except? -1.0

    cpdef long long _held(self) noexcept

    @cython.locals(over=cython.longlong)
    cpdef trim(self)


cdef int IDLE, RUN, SHARED, DONE  # what Steps.advance hands serve (C constants)


@cython.final  # (its methods are direct C calls, which the C compiler inlines into advance)
cdef class Steps:
    cdef public EngineState st
    cdef public LatencyLaw law
    cdef public object clock, bound, sp, tape
    cdef public bint ff, slowed, extra
    cdef public long long k, m, last
    cdef public double end, t_sim, delay, g0, h, f, sg, sdg, sh, dg, mark, span, seen

    @cython.locals(st=EngineState, until=cython.double, now=cython.double, what=cython.int, busy=cython.bint,
                   i=cython.longlong)
    cpdef int advance(self) except -1

    @cython.locals(st=EngineState, k=cython.longlong, m=cython.longlong, end=cython.double, n_dec=cython.longlong,
                   diter=cython.longlong, sum_ctx=cython.longlong)
    cdef inline int _book(self) except -1

    @cython.locals(st=EngineState, sg=cython.double, sdg=cython.double, sh=cython.double, n_dec=cython.longlong,
                   k=cython.longlong, span=cython.double, gap=cython.double)
    cdef inline int _time(self, double now, long long i) except -1

    @cython.locals(st=EngineState, i=cython.longlong, r=cython.double)
    cdef int _idle(self, double now, double until, bint busy) except -2

    @cython.locals(st=EngineState, kv=KVPool, law=LatencyLaw, m=cython.longlong, pf=cython.longlong,
                   n_dec=cython.longlong, sum_ctx=cython.longlong, pairs=cython.longlong, past=cython.longlong,
                   g0=cython.double, dg=cython.double, h=cython.double, vf=cython.double, vg=cython.double,
                   vh=cython.double, sg=cython.double, sh=cython.double, sdg=cython.double)
    cdef inline int _compose(self, double now, bint busy) except -1


# a step of an engine with a KV pool, a prefix cache, a log or a client (which may grow the input arrays: no views)
@cython.locals(kv=KVPool, finish=object, done=list, rids=list)
cpdef _book_slow(EngineState st, long long k, long long m, long long last, double now, double end, long long diter,
                 long long n_dec, long long sum_ctx)
