/* Optional C fast path of TFRecord random access (feedline/formats/tfrecord_index.py).
 *
 * read_records(buffers, files, starts, ends) copies the records framed at
 * [starts[i], ends[i]) of mapped file buffers[files[i]] out as bytes objects, checking the length, its masked CRC32C and the data's
 * masked CRC32C exactly as the Python path does. It returns (records, bad): `bad` is -1, or
 * the position in `starts` of the first record that does not check out (the records before
 * it are returned, and Python raises a DataLossError naming file and offset for it).
 *
 * CRC32C uses the SSE4.2 instruction where the CPU has it, else a slicing-by-8 table.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t table[8][256];

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
        table[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

static uint32_t crc_table(const unsigned char *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        word ^= crc;
        crc = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^
              table[5][(word >> 16) & 0xFF] ^ table[4][(word >> 24) & 0xFF] ^
              table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
              table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return crc ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_hardware(const unsigned char *p,
                                                                size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = __builtin_ia32_crc32di(crc, word);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
#define HAVE_HARDWARE_CRC 1
#endif

static uint32_t (*crc32c)(const unsigned char *, size_t) = crc_table;

static uint32_t masked(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v; /* little-endian hosts only: see the build condition in setup.py */
}

static uint32_t load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static PyObject *read_records(PyObject *self, PyObject *args) {
    PyObject *buffers;
    Py_buffer files, starts, ends;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!y*y*y*", &PyTuple_Type, &buffers, &files, &starts, &ends))
        return NULL;
    PyObject *records = NULL;
    Py_ssize_t bad = -1, mapped = 0, nbuf = PyTuple_GET_SIZE(buffers);
    Py_buffer *views = PyMem_Calloc(nbuf ? nbuf : 1, sizeof(Py_buffer));
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; mapped < nbuf; mapped++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(buffers, mapped), &views[mapped], PyBUF_SIMPLE) < 0)
            goto done;
    if (starts.len != ends.len || starts.len != files.len || starts.len % 8) {
        PyErr_SetString(PyExc_ValueError, "files, starts and ends must be int64 arrays of one length");
        goto done;
    }
    Py_ssize_t count = starts.len / 8;
    const int64_t *f = (const int64_t *)files.buf, *s = (const int64_t *)starts.buf,
                  *e = (const int64_t *)ends.buf;
    records = PyList_New(0);
    if (records == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t which = f[i], start = s[i], end = e[i];
        if (which < 0 || which >= nbuf || start < 0 || end > views[which].len || end - start < 16) {
            bad = i;
            break;
        }
        const unsigned char *frame = (const unsigned char *)views[which].buf + start;
        uint64_t length = load64(frame);
        if (length != (uint64_t)(end - start - 16) ||
            masked(crc32c(frame, 8)) != load32(frame + 8) ||
            masked(crc32c(frame + 12, (size_t)length)) != load32(frame + 12 + length)) {
            bad = i;
            break;
        }
        PyObject *data = PyBytes_FromStringAndSize((const char *)frame + 12, (Py_ssize_t)length);
        if (data == NULL || PyList_Append(records, data) < 0) {
            Py_XDECREF(data);
            Py_CLEAR(records);
            goto done;
        }
        Py_DECREF(data);
    }
done:
    for (Py_ssize_t k = 0; k < mapped; k++) PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyBuffer_Release(&files);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    if (records == NULL) return NULL;
    return Py_BuildValue("(Nn)", records, bad);
}

static PyObject *crc32c_value(PyObject *self, PyObject *args) {
    Py_buffer data;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t crc = crc32c((const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}


/* frame_records(buffer, pos, max_records) -> (records, new_pos)
 * The whole, intact records of ``buffer`` from ``pos`` on, at most ``max_records``: it stops
 * before a record that is incomplete in the buffer or whose checksums do not match, and
 * leaves that record to the Python reader, which reads more of the file or reports the
 * damage with its offset (so errors stay exactly those of the one-record path). */
static PyObject *frame_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, max_records;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &max_records)) return NULL;
    PyObject *records = PyList_New(0);
    if (records == NULL) goto fail;
    const unsigned char *buf = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    if (pos < 0) pos = len;
    for (Py_ssize_t n = 0; n < max_records && len - pos >= 12; n++) {
        const unsigned char *head = buf + pos;
        uint64_t length = load64(head);
        if (masked(crc32c(head, 8)) != load32(head + 8)) break;
        if (len - pos < 16 || length > (uint64_t)(len - pos - 16)) break;
        const unsigned char *data = head + 12;
        if (masked(crc32c(data, (size_t)length)) != load32(data + length)) break;
        PyObject *record = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)length);
        if (record == NULL) goto fail;
        int failed = PyList_Append(records, record);
        Py_DECREF(record);
        if (failed) goto fail;
        pos += 16 + (Py_ssize_t)length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", records, pos);
fail:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"frame_records", frame_records, METH_VARARGS,
     "frame_records(buffer, pos, max_records) -> (intact records from pos, position after them)"},
    {"read_records", read_records, METH_VARARGS,
     "read_records(buffers, files, starts, ends) -> (records, first bad position or -1)"},
    {"crc32c", crc32c_value, METH_VARARGS, "CRC32C of a buffer (for tests)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tfrecord_fast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tfrecord_fast(void) {
    init_table();
#ifdef HAVE_HARDWARE_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc32c = crc_hardware;
#endif
    return PyModule_Create(&module);
}
