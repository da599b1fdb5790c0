/* feedline.profiling._probe: the per-stage counter behind pipeline statistics.
 *
 * A Probe stands in for one stage iterator in its consumer's hands: next(probe) calls the
 * iterator's own next, counts every call and times a sample of them: all calls while they
 * are slow (mean above SLOW_NS), one in SAMPLE_EVERY while they are fast, so a stage that
 * hands out a million cheap records a second pays a counter increment per record and
 * two clock reads per sample. This is why it is C: the same wrapper in Python costs
 * ~250 ns per call, more than a cheap stage's whole work. (Swapping the iterator's class
 * for an instrumented subclass instead costs ~120 ns per call in its attribute reads: the
 * instance's inline attribute values no longer match the new class's cached keys.)
 *
 * Everything else is the iterator's: attribute reads and writes go to it, and
 * ``__class__`` is its class, so ``isinstance`` checks and stage code that reaches into
 * its input see the iterator itself.
 *
 * Several threads may call one probe at once (a parallel map's threads pulling its input).
 * Without the GIL (free-threaded CPython) the per-call counters are atomic increments, and the
 * timed calls' bookkeeping (sums, the thread list, the sizer and tick references) is updated
 * under the probe's own mutex, never held while Python code runs. With the GIL both are plain:
 * the GIL already orders them, and the untimed path stays one increment.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define SAMPLE_MASK 63 /* time one call in 64 while calls are fast */
#define CPU_EVERY 8     /* of the timed calls, one in 8 also reads the thread's CPU clock */
#define SLOW_NS 20000  /* calls slower than this on average: time every one */
#define MAX_THREADS 16
#define SIZED_FIRST 8   /* the first timed calls whose elements are sized, then ... */
#define SIZE_MASK 63    /* ... one timed call in 64 */
/* Which calls are timed is a Weyl sequence of the call number (Fibonacci hashing: the top
 * bits of n * 2^64/phi), not every 64th call: a stage called in a period of its own (a
 * batch of 8 pulling chunks of 8) would otherwise time only its cheap or only its dear
 * calls, and the mean of the sample would be off by the period's ratio. */
#define WEYL 0x9E3779B97F4A7C15ULL
#define SPREAD(n, bits) ((uint64_t)((n) * WEYL) >> (64 - (bits)))

#ifdef Py_GIL_DISABLED
#define ATOMIC_ADD(field, n) __atomic_add_fetch(&(field), (n), __ATOMIC_RELAXED)
#define ATOMIC_LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
#define ATOMIC_STORE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELAXED)
#define LOCK(p) PyMutex_Lock(&(p)->mutex)
#define UNLOCK(p) PyMutex_Unlock(&(p)->mutex)
#else
#define ATOMIC_ADD(field, n) ((field) += (n))
#define ATOMIC_LOAD(field) (field)
#define ATOMIC_STORE(field, value) ((field) = (value))
#define LOCK(p) ((void)0)
#define UNLOCK(p) ((void)0)
#endif

typedef struct {
    PyObject_HEAD
    PyObject *inner;       /* the stage iterator */
    iternextfunc inner_next;
    PyObject *spans;       /* list of (start_ns, duration_ns, thread ident), or None */
    Py_ssize_t max_spans;
    PyObject *sizer;       /* element -> its bytes, called on a sample of calls, or NULL */
    PyObject *weakrefs;
    uint64_t calls;
    uint64_t untimed;      /* calls not timed (0: every call was, the estimates are exact) */
    uint64_t stops;
    uint64_t errors;
    uint64_t sampled;
    uint64_t sampled_ns;
    uint64_t cpu_sampled;  /* timed calls whose CPU time was read too */
    uint64_t sampled_cpu_ns; /* their CPU time on their thread (no GIL waits) */
    uint64_t first_ns;     /* the first call, kept apart: it often fills buffers, opens files */
    uint64_t first_cpu_ns;
    uint64_t sized;        /* elements whose bytes the sizer measured */
    uint64_t sized_bytes;
    uint64_t mask;
    PyObject *tick;        /* called on the consumer's thread every tick_ns, or NULL */
    uint64_t tick_ns;
    uint64_t next_tick;
    unsigned long threads[MAX_THREADS];
    int nthreads;
#ifdef Py_GIL_DISABLED
    PyMutex mutex;         /* the timed calls' fields: everything below calls/untimed/stops/errors */
#endif
} Probe;

static inline uint64_t clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* Under the probe's lock. */
static void note_thread(Probe *p) {
    unsigned long ident = PyThread_get_thread_ident();
    for (int i = 0; i < p->nthreads; i++) {
        if (p->threads[i] == ident) return;
    }
    if (p->nthreads < MAX_THREADS) p->threads[p->nthreads++] = ident;
}

/* A NULL from the inner next: the end (no exception, or StopIteration) or an error. */
static void note_end(Probe *p) {
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_StopIteration)) ATOMIC_ADD(p->stops, 1);
    else ATOMIC_ADD(p->errors, 1);
}

static int record_span(Probe *p, uint64_t start, uint64_t duration) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *span = Py_BuildValue("(KKk)", (unsigned long long)start,
                                   (unsigned long long)duration, PyThread_get_thread_ident());
    int failed = span == NULL || PyList_Append(p->spans, span) < 0;
    Py_XDECREF(span);
    if (failed) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    PyErr_Restore(type, value, traceback);
    return 0;
}

/* A failing call from the probe (the sizer, the tick) is a warning, never an error of the
 * pipeline: the exception is cleared. */
static void warn_failed(const char *what, PyObject *culprit) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "feedline: %s failed: %R", what, value) < 0)
        PyErr_WriteUnraisable(culprit); /* warnings turned into errors */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* Calls ``sizer`` (the caller's reference, taken under the lock) on the element. */
static void size_element(Probe *p, PyObject *sizer, PyObject *element) {
    PyObject *size = PyObject_CallOneArg(sizer, element);
    unsigned long long bytes = size == NULL ? (unsigned long long)-1
                                            : PyLong_AsUnsignedLongLong(size);
    Py_XDECREF(size);
    if (bytes == (unsigned long long)-1 && PyErr_Occurred()) {
        warn_failed("measuring an element's size", sizer);
        /* Dropped once: it would fail again on every sample. Another thread's failing call
         * may have dropped it meanwhile. */
        PyObject *dropped = NULL;
        LOCK(p);
        if (p->sizer == sizer) {
            dropped = p->sizer;
            p->sizer = NULL;
        }
        UNLOCK(p);
        Py_XDECREF(dropped);
        return;
    }
    LOCK(p);
    p->sized++;
    p->sized_bytes += bytes;
    UNLOCK(p);
}

static PyObject *probe_iternext(Probe *p) {
    uint64_t call = ATOMIC_ADD(p->calls, 1);
    if (SPREAD(call, 6) & ATOMIC_LOAD(p->mask)) {
        ATOMIC_ADD(p->untimed, 1);
        PyObject *result = p->inner_next(p->inner);
        if (result == NULL) note_end(p);
        return result;
    }
    /* CPU time besides wall time: a sampled call's wall time includes waiting for the
     * GIL while other threads run (up to the 5 ms switch interval), its CPU time not. The
     * thread CPU clock is a system call (~0.5 us in a VM, the monotonic clock ~20 ns), so
     * only one timed call in CPU_EVERY reads it. */
    int read_cpu = call == 1 || SPREAD(ATOMIC_LOAD(p->sampled), 3) == 0;
    uint64_t cpu_start = read_cpu ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
    uint64_t start = now_ns();
    PyObject *result = p->inner_next(p->inner);
    uint64_t duration = now_ns() - start;
    uint64_t cpu = read_cpu ? clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_start : 0;
    PyObject *sizer = NULL, *tick = NULL;
    LOCK(p);
    if (call == 1) {
        p->first_ns = duration;
        p->first_cpu_ns = cpu;
    } else {
        ATOMIC_STORE(p->sampled, p->sampled + 1);
        p->sampled_ns += duration;
        if (read_cpu) {
            p->cpu_sampled++;
            p->sampled_cpu_ns += cpu;
        }
    }
    /* Until a call besides the first was timed, time the next one too. */
    ATOMIC_STORE(p->mask,
                 (!p->sampled || p->sampled_ns / p->sampled > SLOW_NS) ? 0 : SAMPLE_MASK);
    note_thread(p);
    if (result != NULL && p->sizer != NULL &&
        (p->sampled <= SIZED_FIRST || (p->sampled & SIZE_MASK) == 1)) {
        /* Measured now, the number kept, never the element: holding one a while (a 38 MB
         * batch of images) changes how the allocator reuses memory, and every later batch
         * then faulted in fresh pages (12% slower). */
        sizer = Py_NewRef(p->sizer);
    }
    if (result != NULL && p->tick != NULL && start >= p->next_tick) {
        p->next_tick = start + duration + p->tick_ns;
        tick = Py_NewRef(p->tick);
    }
    UNLOCK(p);
    /* Python calls only with the lock released: they may run other threads' calls. */
    if (result == NULL) note_end(p);
    if (sizer != NULL) {
        size_element(p, sizer, result);
        Py_DECREF(sizer);
    }
    if (tick != NULL) {
        /* The statistics' periodic sample, on the thread that reads the pipeline: a thread
         * of its own would wait for the GIL, which numpy calls release and take back at once,
         * nearly all the time, and a waiting thread costs the others. A failing sample is
         * a warning, never an error of the pipeline. */
        PyObject *done = PyObject_CallNoArgs(tick);
        if (done == NULL) warn_failed("a statistics sample", tick);
        Py_XDECREF(done);
        Py_DECREF(tick);
    }
    /* Threads racing past the check can add a span or two over max_spans: it bounds memory,
     * not an exact count. */
    if (p->spans != Py_None && PyList_GET_SIZE(p->spans) < p->max_spans &&
        record_span(p, start, duration) < 0) {
        Py_XDECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *probe_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"inner", "spans", "max_spans", "sizer", NULL};
    PyObject *inner, *spans = Py_None, *sizer = Py_None;
    Py_ssize_t max_spans = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OnO", keywords, &inner, &spans, &max_spans,
                                     &sizer))
        return NULL;
    if (sizer != Py_None && !PyCallable_Check(sizer)) {
        PyErr_SetString(PyExc_TypeError, "Probe(sizer): a callable or None");
        return NULL;
    }
    if (Py_TYPE(inner)->tp_iternext == NULL) {
        PyErr_SetString(PyExc_TypeError, "Probe(inner): inner must be an iterator");
        return NULL;
    }
    if (spans != Py_None && !PyList_Check(spans)) {
        PyErr_SetString(PyExc_TypeError, "Probe(spans): a list or None");
        return NULL;
    }
    Probe *p = (Probe *)type->tp_alloc(type, 0);
    if (p == NULL) return NULL;
    p->inner = Py_NewRef(inner);
    p->inner_next = Py_TYPE(inner)->tp_iternext;
    p->spans = Py_NewRef(spans);
    p->max_spans = max_spans;
    p->sizer = sizer == Py_None ? NULL : Py_NewRef(sizer);
    p->mask = 0; /* the first two calls are timed: the second decides whether calls are slow */
    return (PyObject *)p;
}

static int probe_traverse(Probe *p, visitproc visit, void *arg) {
    Py_VISIT(p->inner);
    Py_VISIT(p->spans);
    Py_VISIT(p->sizer);
    Py_VISIT(p->tick);
    return 0;
}

static int probe_clear(Probe *p) {
    Py_CLEAR(p->inner);
    Py_CLEAR(p->spans);
    Py_CLEAR(p->sizer);
    Py_CLEAR(p->tick);
    return 0;
}

static PyObject *probe_drive(Probe *p, PyObject *args) {
    PyObject *tick;
    double seconds;
    if (!PyArg_ParseTuple(args, "Od", &tick, &seconds)) return NULL;
    if (tick != Py_None && !PyCallable_Check(tick)) {
        PyErr_SetString(PyExc_TypeError, "_probe_drive(tick, seconds): tick must be callable");
        return NULL;
    }
    if (!(seconds > 0)) {
        PyErr_SetString(PyExc_ValueError, "_probe_drive(tick, seconds): seconds must be > 0");
        return NULL;
    }
    PyObject *replaced;
    LOCK(p);
    replaced = p->tick;
    p->tick = tick == Py_None ? NULL : Py_NewRef(tick);
    p->tick_ns = (uint64_t)(seconds * 1e9);
    p->next_tick = now_ns() + p->tick_ns;
    UNLOCK(p);
    Py_XDECREF(replaced); /* outside the lock: its last reference may run Python code */
    Py_RETURN_NONE;
}

static void probe_dealloc(Probe *p) {
    PyObject_GC_UnTrack(p);
    if (p->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)p);
    probe_clear(p);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *probe_next_method(Probe *p, PyObject *Py_UNUSED(ignored)) {
    PyObject *result = probe_iternext(p);
    if (result == NULL && !PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
    return result;
}

static PyObject *probe_counts(Probe *p, PyObject *Py_UNUSED(ignored)) {
    /* A consistent copy of the timed calls' fields, taken under the lock; the objects are
     * made after it. */
    unsigned long idents[MAX_THREADS];
    LOCK(p);
    int nthreads = p->nthreads;
    memcpy(idents, p->threads, sizeof idents);
    unsigned long long sampled = p->sampled, sampled_ns = p->sampled_ns,
                       first_ns = p->first_ns, cpu_sampled = p->cpu_sampled,
                       sampled_cpu_ns = p->sampled_cpu_ns, first_cpu_ns = p->first_cpu_ns,
                       sized = p->sized, sized_bytes = p->sized_bytes;
    UNLOCK(p);
    PyObject *threads = PyTuple_New(nthreads);
    if (threads == NULL) return NULL;
    for (int i = 0; i < nthreads; i++) {
        PyObject *ident = PyLong_FromUnsignedLong(idents[i]);
        if (ident == NULL) {
            Py_DECREF(threads);
            return NULL;
        }
        PyTuple_SET_ITEM(threads, i, ident);
    }
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsN}",
                         "calls", (unsigned long long)ATOMIC_LOAD(p->calls),
                         "untimed", (unsigned long long)ATOMIC_LOAD(p->untimed),
                         "stops", (unsigned long long)ATOMIC_LOAD(p->stops),
                         "errors", (unsigned long long)ATOMIC_LOAD(p->errors),
                         "sampled", sampled, "sampled_ns", sampled_ns, "first_ns", first_ns,
                         "cpu_sampled", cpu_sampled, "sampled_cpu_ns", sampled_cpu_ns,
                         "first_cpu_ns", first_cpu_ns, "sized", sized,
                         "sized_bytes", sized_bytes, "threads", threads);
}

static PyObject *probe_get_inner(Probe *p, void *closure) { return Py_NewRef(p->inner); }
static PyObject *probe_get_class(Probe *p, void *closure) {
    return Py_NewRef((PyObject *)Py_TYPE(p->inner));
}

static PyMethodDef probe_methods[] = {
    {"__next__", (PyCFunction)probe_next_method, METH_NOARGS, "The stage's next element."},
    {"_probe_drive", (PyCFunction)probe_drive, METH_VARARGS,
     "_probe_drive(tick, seconds): call tick() from this probe's timed calls, at most every\n"
     "seconds (tick None: stop)."},
    {"_probe_counts", (PyCFunction)probe_counts, METH_NOARGS,
     "_probe_counts() -> dict: calls, untimed, stops, errors, sampled, sampled_ns (first call apart),\n"
     "first_ns, cpu_sampled, sampled_cpu_ns, first_cpu_ns, sized, sized_bytes, threads\n"
     "(idents)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef probe_getset[] = {
    {"_probe_inner", (getter)probe_get_inner, NULL, "The stage iterator.", NULL},
    {"__class__", (getter)probe_get_class, NULL, "The stage iterator's class.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* The probe's own names (__next__, __class__, __iter__, _probe_*) come from it; every
 * other attribute is the stage iterator's. */
static int own_name(PyObject *name) {
    if (!PyUnicode_Check(name)) return 0;
    const char *text = PyUnicode_AsUTF8(name);
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    return strcmp(text, "__next__") == 0 || strcmp(text, "__class__") == 0 ||
           strcmp(text, "__iter__") == 0 || strncmp(text, "_probe_", 7) == 0;
}

static PyObject *probe_getattro(Probe *p, PyObject *name) {
    if (own_name(name)) return PyObject_GenericGetAttr((PyObject *)p, name);
    return PyObject_GetAttr(p->inner, name);
}

static int probe_setattro(Probe *p, PyObject *name, PyObject *value) {
    return PyObject_SetAttr(p->inner, name, value);
}

static PyObject *probe_repr(Probe *p) { return PyUnicode_FromFormat("<probe of %R>", p->inner); }

static PyTypeObject ProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "feedline.profiling._probe.Probe",
    .tp_basicsize = sizeof(Probe),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Probe(inner, spans=None, max_spans=0, sizer=None): counts and samples a stage's next()\n"
               "(sizer(element) -> bytes, called on the first 8 timed calls, then one in 64).",
    .tp_new = probe_new,
    .tp_dealloc = (destructor)probe_dealloc,
    .tp_traverse = (traverseproc)probe_traverse,
    .tp_clear = (inquiry)probe_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)probe_iternext,
    .tp_getattro = (getattrofunc)probe_getattro,
    .tp_setattro = (setattrofunc)probe_setattro,
    .tp_repr = (reprfunc)probe_repr,
    .tp_weaklistoffset = offsetof(Probe, weakrefs),
    .tp_methods = probe_methods,
    .tp_getset = probe_getset,
};

static int probe_exec(PyObject *module) {
    if (PyType_Ready(&ProbeType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Probe", (PyObject *)&ProbeType) < 0 ||
        PyModule_AddIntConstant(module, "SAMPLE_EVERY", SAMPLE_MASK + 1) < 0 ||
        PyModule_AddIntConstant(module, "SLOW_NS", SLOW_NS) < 0 ||
        PyModule_AddIntConstant(module, "CPU_EVERY", CPU_EVERY) < 0 ||
        PyModule_AddIntConstant(module, "SIZED_FIRST", SIZED_FIRST) < 0 ||
        PyModule_AddIntConstant(module, "SIZE_EVERY", SIZE_MASK + 1) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot probe_slots[] = {
    {Py_mod_exec, probe_exec},
#if PY_VERSION_HEX >= 0x030D0000
    /* A probe's fields are atomic or under its own mutex (see the top): safe without the GIL. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef probe_module = {
    PyModuleDef_HEAD_INIT, "feedline.profiling._probe",
    "Per-stage call counting and sampled timing for pipeline statistics.", 0, NULL,
    probe_slots,
};

PyMODINIT_FUNC PyInit__probe(void) { return PyModuleDef_Init(&probe_module); }
