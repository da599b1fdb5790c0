/* normalize's uint8 -> float32 path (feedline/image/dtype.py) in one C loop, the GIL released.

   NumPy's version is a cast and two in-place passes: three calls that each take the GIL
   back, which on many threads serializes them (normalize of a 224x224x3 image: 177 us on
   one thread, 160 us per image on two). The arithmetic is NumPy's exactly: the uint8 value
   converted to float, multiplied by the float32 scale (rounded to float32), then the float32
   shift added (rounded again); two separate roundings, never a fused multiply-add (setup.py
   builds it with -ffp-contract=off: on CPUs with FMA, GCC would otherwise fuse them). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyDoc_STRVAR(normalize_u8_doc,
"normalize_u8(source, out, scale, shift)\n\n"
"out[i] = float32(float32(source[i]) * scale[c]) + shift[c], c = i % len(scale): source a\n"
"C-contiguous uint8 buffer, out a writable float32 buffer of as many items, scale and\n"
"shift float32 buffers of one value per channel.");

static int
get_floats(PyObject *object, Py_buffer *view, int writable, const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object, view, flags) < 0)
        return -1;
    if (view->itemsize != sizeof(float) || view->format == NULL
        || strcmp(view->format, "f") != 0) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous float32 buffer", name);
        return -1;
    }
    return 0;
}

static PyObject *
normalize_u8(PyObject *module, PyObject *args)
{
    PyObject *source_object, *out_object, *scale_object, *shift_object;
    if (!PyArg_ParseTuple(args, "OOOO", &source_object, &out_object, &scale_object,
                          &shift_object))
        return NULL;
    Py_buffer source, out, scale, shift;
    if (PyObject_GetBuffer(source_object, &source, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (source.itemsize != 1 || source.format == NULL || strcmp(source.format, "B") != 0) {
        PyBuffer_Release(&source);
        PyErr_SetString(PyExc_TypeError, "source must be a contiguous uint8 buffer");
        return NULL;
    }
    if (get_floats(out_object, &out, 1, "out") < 0) {
        PyBuffer_Release(&source);
        return NULL;
    }
    if (get_floats(scale_object, &scale, 0, "scale") < 0) {
        PyBuffer_Release(&out);
        PyBuffer_Release(&source);
        return NULL;
    }
    if (get_floats(shift_object, &shift, 0, "shift") < 0) {
        PyBuffer_Release(&scale);
        PyBuffer_Release(&out);
        PyBuffer_Release(&source);
        return NULL;
    }
    Py_ssize_t count = source.len;
    Py_ssize_t channels = scale.len / (Py_ssize_t)sizeof(float);
    const char *problem = NULL;
    if (out.len != count * (Py_ssize_t)sizeof(float))
        problem = "out must have as many items as source";
    else if (channels < 1 || shift.len != scale.len)
        problem = "scale and shift must have the same number of values, at least one";
    else if (count % channels != 0)
        problem = "source's size must be a multiple of the channel count";
    if (problem == NULL) {
        const unsigned char *s = (const unsigned char *)source.buf;
        float *o = (float *)out.buf;
        const float *a = (const float *)scale.buf, *b = (const float *)shift.buf;
        Py_BEGIN_ALLOW_THREADS
        if (channels == 3) {
            const float a0 = a[0], a1 = a[1], a2 = a[2], b0 = b[0], b1 = b[1], b2 = b[2];
            for (Py_ssize_t i = 0; i < count; i += 3) {
                o[i] = (float)s[i] * a0 + b0;
                o[i + 1] = (float)s[i + 1] * a1 + b1;
                o[i + 2] = (float)s[i + 2] * a2 + b2;
            }
        }
        else {
            for (Py_ssize_t i = 0; i < count; i += channels)
                for (Py_ssize_t c = 0; c < channels; c++)
                    o[i + c] = (float)s[i + c] * a[c] + b[c];
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&shift);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&out);
    PyBuffer_Release(&source);
    if (problem != NULL) {
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"normalize_u8", normalize_u8, METH_VARARGS, normalize_u8_doc},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030D0000
    /* No state of its own; it works on the caller's buffers (held for the call). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_normalize_fast",
    "normalize's uint8 -> float32 loop in C (see feedline/image/dtype.py)", 0, methods, slots,
};

PyMODINIT_FUNC
PyInit__normalize_fast(void)
{
    return PyModuleDef_Init(&module);
}
