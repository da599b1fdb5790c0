/* The inner loops of shuffle's chunked path (feedline/transforms/shuffle.py), in C.

   Both take uniform draws in [0, 1) from a float64 buffer (the iterator's block of NumPy
   draws) and place them exactly as the Python loops do: place = min((long)(u * n), n - 1),
   the same double arithmetic, so the order is the same element for element. They only move
   references between Python lists; the GIL is held throughout. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static Py_ssize_t
place(double u, Py_ssize_t n)
{
    Py_ssize_t i = (Py_ssize_t)(u * (double)n);
    return i < n - 1 ? i : n - 1;
}

PyDoc_STRVAR(swap_draws_doc,
"swap_draws(buffer, uniforms, fresh, start, out)\n\n"
"For each uniform u and each element of fresh[start:] in turn: the buffer (one short of\n"
"full) takes the element and gives back the one at place(u, len(buffer) + 1), the element\n"
"itself when that place is the last, appended to out.");

static PyObject *
swap_draws(PyObject *module, PyObject *args)
{
    PyObject *buffer, *uniforms, *fresh, *out;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!OO!nO!", &PyList_Type, &buffer, &uniforms, &PyList_Type,
                          &fresh, &start, &PyList_Type, &out))
        return NULL;
    Py_buffer view;
    if (get_uniforms(uniforms, &view) < 0)
        return NULL;
    const double *u = (const double *)view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)sizeof(double);
    if (start < 0 || start + count > PyList_GET_SIZE(fresh)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "more uniforms than fresh elements");
        return NULL;
    }
    Py_ssize_t top = PyList_GET_SIZE(buffer);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *element = PyList_GET_ITEM(fresh, start + k);
        Py_ssize_t i = place(u[k], top + 1);
        if (i < top) {
            PyObject *drawn = PyList_GET_ITEM(buffer, i);
            if (PyList_Append(out, drawn) < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            Py_INCREF(element);
            PyList_SET_ITEM(buffer, i, element);
            Py_DECREF(drawn);
        } else if (PyList_Append(out, element) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(drain_doc,
"drain(buffer, uniforms, out)\n\n"
"For each uniform u: take the element at place(u, len(buffer)) out of the buffer (the last\n"
"element fills its place) and append it to out. There must be no more uniforms than\n"
"elements in the buffer.");

static PyObject *
drain(PyObject *module, PyObject *args)
{
    PyObject *buffer, *uniforms, *out;
    if (!PyArg_ParseTuple(args, "O!OO!", &PyList_Type, &buffer, &uniforms, &PyList_Type, &out))
        return NULL;
    Py_buffer view;
    if (get_uniforms(uniforms, &view) < 0)
        return NULL;
    const double *u = (const double *)view.buf;
    Py_ssize_t count = view.len / (Py_ssize_t)sizeof(double);
    if (count > PyList_GET_SIZE(buffer)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "more uniforms than buffered elements");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t n = PyList_GET_SIZE(buffer);
        Py_ssize_t i = place(u[k], n);
        PyObject *drawn = PyList_GET_ITEM(buffer, i);
        if (PyList_Append(out, drawn) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        PyObject *last = PyList_GET_ITEM(buffer, n - 1);
        if (i < n - 1) {
            Py_INCREF(last);
            PyList_SET_ITEM(buffer, i, last);
            Py_DECREF(drawn);
        }
        /* Drop the last place (its reference now lives at i, or in out when i is last). */
        if (PyList_SetSlice(buffer, n - 1, n, NULL) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"swap_draws", swap_draws, METH_VARARGS, swap_draws_doc},
    {"drain", drain, METH_VARARGS, drain_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_shuffle_fast",
    "shuffle's inner loops in C (see feedline/transforms/shuffle.py)", -1, methods,
};

PyMODINIT_FUNC
PyInit__shuffle_fast(void)
{
    return PyModule_Create(&module);
}
