/* The inner loops of shuffle's chunked path (feedline/transforms/shuffle.py), in C.

   Both take uniform draws in [0, 1) from a float64 buffer (the iterator's block of NumPy
   draws) and place them exactly as the Python loops do: place = min((long)(u * n), n - 1),
   the same double arithmetic, so the order is the same element for element. They only move
   references between Python lists and never release the GIL.

   Without the GIL (free-threaded CPython) each call holds the buffer's (and fresh's) critical
   section while it reads and moves their items, so a thread that touches the same lists
   meanwhile waits instead of seeing a half-moved reference; out is only appended to
   (PyList_Append locks it). Nothing inside calls a list function on the buffer: locking the
   same object again suspends the outer critical section (CPython 3.13), letting another
   thread in halfway. The module keeps no state of its own. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef Py_BEGIN_CRITICAL_SECTION /* before 3.13: the GIL is the only lock there is */
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#define Py_BEGIN_CRITICAL_SECTION2(a, b) {
#define Py_END_CRITICAL_SECTION2() }
#endif

/* A list slot written while its list's critical section is held: a release store where
   lock-free readers (PyList_GetItemRef) may load it concurrently, as CPython's own list does. */
#ifdef Py_GIL_DISABLED
#define SET_SLOT(list, i, value) \
    __atomic_store_n(&((PyListObject *)(list))->ob_item[i], (value), __ATOMIC_RELEASE)
#define SET_LENGTH(list, n) __atomic_store_n(&((PyVarObject *)(list))->ob_size, (n), __ATOMIC_RELEASE)
#else
#define SET_SLOT(list, i, value) PyList_SET_ITEM((list), (i), (value))
#define SET_LENGTH(list, n) Py_SET_SIZE((list), (n))
#endif

static int
get_uniforms(PyObject *object, Py_buffer *view)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != sizeof(double) || view->format == NULL
        || strcmp(view->format, "d") != 0) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "uniforms must be a contiguous float64 buffer");
        return -1;
    }
    return 0;
}

/* The optional numbers buffer: a writable int64 array (array('q')) parallel to the shuffle
   buffer, permuted the same way, so a checkpoint can name the buffered elements by the
   input position they were read at instead of storing them. None: not tracked. */
static int
get_numbers(PyObject *object, Py_buffer *view, Py_ssize_t needed)
{
    view->obj = NULL;
    if (object == Py_None)
        return 0;
    if (PyObject_GetBuffer(object, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != (Py_ssize_t)sizeof(long long) || view->format == NULL
        || (strcmp(view->format, "q") != 0 && strcmp(view->format, "l") != 0
            && strcmp(view->format, "<q") != 0)
        || view->len / view->itemsize < needed) {
        PyBuffer_Release(view);
        view->obj = NULL;
        PyErr_SetString(PyExc_TypeError,
                        "numbers must be a writable int64 buffer as long as the buffer");
        return -1;
    }
    return 0;
}

static Py_ssize_t
place(double u, Py_ssize_t n)
{
    Py_ssize_t i = (Py_ssize_t)(u * (double)n);
    return i < n - 1 ? i : n - 1;
}

PyDoc_STRVAR(swap_draws_doc,
"swap_draws(buffer, uniforms, fresh, start, out, numbers=None, first=0)\n\n"
"For each uniform u and each element of fresh[start:] in turn: the buffer (one short of\n"
"full) takes the element and gives back the one at place(u, len(buffer) + 1), the element\n"
"itself when that place is the last, appended to out. With numbers (an int64 buffer as\n"
"long as the buffer), the slot that takes fresh[start + k] gets the number first + k.");

static PyObject *
swap_draws(PyObject *module, PyObject *args)
{
    PyObject *buffer, *uniforms, *fresh, *out, *numbers_object = Py_None;
    Py_ssize_t start;
    long long first = 0;
    if (!PyArg_ParseTuple(args, "O!OO!nO!|OL", &PyList_Type, &buffer, &uniforms, &PyList_Type,
                          &fresh, &start, &PyList_Type, &out, &numbers_object, &first))
        return NULL;
    Py_buffer view, numbers_view;
    if (get_uniforms(uniforms, &view) < 0)
        return NULL;
    if (get_numbers(numbers_object, &numbers_view, PyList_GET_SIZE(buffer)) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    long long *numbers = numbers_view.obj == NULL ? NULL : (long long *)numbers_view.buf;
    const double *u = (const double *)view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)sizeof(double);
    int status = 0;
    Py_BEGIN_CRITICAL_SECTION2(buffer, fresh);
    if (start < 0 || start + count > PyList_GET_SIZE(fresh)) {
        PyErr_SetString(PyExc_ValueError, "more uniforms than fresh elements");
        status = -1;
    }
    Py_ssize_t top = PyList_GET_SIZE(buffer);
    for (Py_ssize_t k = 0; k < count && status == 0; k++) {
        PyObject *element = PyList_GET_ITEM(fresh, start + k);
        Py_ssize_t i = place(u[k], top + 1);
        if (i < top) {
            PyObject *drawn = PyList_GET_ITEM(buffer, i);
            if (PyList_Append(out, drawn) < 0) {
                status = -1;
                break;
            }
            SET_SLOT(buffer, i, Py_NewRef(element));
            Py_DECREF(drawn);
            if (numbers != NULL)
                numbers[i] = first + k;
        } else if (PyList_Append(out, element) < 0) {
            status = -1;
        }
    }
    Py_END_CRITICAL_SECTION2();
    PyBuffer_Release(&view);
    if (numbers != NULL)
        PyBuffer_Release(&numbers_view);
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(drain_doc,
"drain(buffer, uniforms, out, numbers=None)\n\n"
"For each uniform u: take the element at place(u, len(buffer)) out of the buffer (the last\n"
"element fills its place) and append it to out. There must be no more uniforms than\n"
"elements in the buffer. numbers (an int64 buffer at least as long as the buffer) is\n"
"permuted the same way; the caller cuts it to the buffer's new length.");

static PyObject *
drain(PyObject *module, PyObject *args)
{
    PyObject *buffer, *uniforms, *out, *numbers_object = Py_None;
    if (!PyArg_ParseTuple(args, "O!OO!|O", &PyList_Type, &buffer, &uniforms, &PyList_Type,
                          &out, &numbers_object))
        return NULL;
    Py_buffer view, numbers_view;
    if (get_uniforms(uniforms, &view) < 0)
        return NULL;
    if (get_numbers(numbers_object, &numbers_view, PyList_GET_SIZE(buffer)) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    long long *numbers = numbers_view.obj == NULL ? NULL : (long long *)numbers_view.buf;
    const double *u = (const double *)view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)sizeof(double);
    int status = 0;
    Py_BEGIN_CRITICAL_SECTION(buffer);
    Py_ssize_t n = PyList_GET_SIZE(buffer), full = n;
    if (count > n) {
        PyErr_SetString(PyExc_ValueError, "more uniforms than buffered elements");
        status = -1;
    }
    /* Each draw swaps the drawn element with the last live one and shortens the live part
       [0, n) by one; the drawn ones, gathered behind it, are cut off at the end (the list
       keeps its allocation, as after a pop) and their slots' references dropped: out holds
       its own, so none is freed here. */
    for (Py_ssize_t k = 0; k < count && status == 0; k++, n--) {
        Py_ssize_t i = place(u[k], n);
        PyObject *drawn = PyList_GET_ITEM(buffer, i);
        if (PyList_Append(out, drawn) < 0) {
            status = -1;
            break;
        }
        if (i < n - 1) {
            SET_SLOT(buffer, i, PyList_GET_ITEM(buffer, n - 1));
            SET_SLOT(buffer, n - 1, drawn);
            if (numbers != NULL)
                numbers[i] = numbers[n - 1];
        }
    }
    if (n < full) {
        SET_LENGTH(buffer, n);
        for (Py_ssize_t k = n; k < full; k++)
            Py_DECREF(((PyListObject *)buffer)->ob_item[k]);
    }
    Py_END_CRITICAL_SECTION();
    PyBuffer_Release(&view);
    if (numbers != NULL)
        PyBuffer_Release(&numbers_view);
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"swap_draws", swap_draws, METH_VARARGS, swap_draws_doc},
    {"drain", drain, METH_VARARGS, drain_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030D0000
    /* No state of its own and its lists locked per call: safe without the GIL. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_shuffle_fast",
    "shuffle's inner loops in C (see feedline/transforms/shuffle.py)", 0, methods, slots,
};

PyMODINIT_FUNC
PyInit__shuffle_fast(void)
{
    return PyModuleDef_Init(&module);
}
