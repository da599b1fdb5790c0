/* Optional C fast paths of TFRecord reading (feedline/formats/tfrecord.py) and random access
 * (feedline/formats/tfrecord_index.py). Every function checks the length, its masked CRC32C
 * and the data's masked CRC32C exactly as the Python path does, and stops before anything it
 * cannot hand out whole and intact: the Python path then reads that record again and
 * reports it with TensorFlow's message, file name and offset, so errors are one code's.
 *
 * read_frames(fd, store, pos, valid, file_pos, limit, max_bytes) reads a local file with
 * pread: small records are framed out of large reads into `store` (one copy each into its
 * bytes object), large ones are read by the kernel straight into their bytes object with the
 * next few KiB behind them in the same preadv (one copy, no staging buffer).
 *
 * frame_records(buffer, pos, max_records) frames the intact records of a buffer (any file
 * object's reads, e.g. fsspec's).
 *
 * read_records(buffers, files, starts, ends) copies the records framed at
 * [starts[i], ends[i]) of mapped file buffers[files[i]] out as bytes objects. It returns
 * (records, bad): `bad` is -1, or the position in `starts` of the first record that does not
 * check out (the records before it are returned, and Python raises a DataLossError naming
 * file and offset for it).
 *
 * CRC32C uses the SSE4.2 instruction where the CPU has it (three independent streams, as in
 * Mark Adler's crc32c.c, since one crc32 instruction waits three cycles for the one before),
 * else a slicing-by-8 table. *
 * Without the GIL (free-threaded CPython): the module's only state is the CRC tables, filled
 * once before the module exists and read-only after. Each call reads its own arguments; a
 * store is one reader's (read_frames holds its buffer for the call, so it cannot be resized
 * or freed meanwhile, and every offset into it is checked against the lengths it read first).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#endif

#define POLY 0x82F63B78u

static uint32_t table[8][256];

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (POLY & (0u - (crc & 1u)));
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
/* Three streams of LONG (then SHORT) bytes each are checksummed side by side and joined:
 * the CRC of A then B is the CRC of A moved over len(B) zero bytes, xor B's CRC from 0.
 * shift_long / shift_short move a CRC over LONG / SHORT zero bytes, a byte at a time. */
#define LONG 8192
#define SHORT 256
static uint32_t shift_long[4][256], shift_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1) sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends `len` zero bytes (a power of two) to a CRC. */
static void zeros_operator(uint32_t *even, size_t len) {
    uint32_t odd[32];
    odd[0] = POLY; /* one zero bit */
    for (int n = 1; n < 32; n++) odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    for (;;) {
        gf2_square(even, odd); /* one byte, then four, ... */
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
        if (len == 0) break;
    }
    memcpy(even, odd, sizeof odd);
}

static void zeros_table(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    zeros_operator(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^
           zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hardware(const unsigned char *p,
                                                                size_t n) {
    uint64_t crc0 = 0xFFFFFFFFu, crc1, crc2, word0, word1, word2;
    while (n >= 3 * LONG) {
        crc1 = crc2 = 0;
        const unsigned char *end = p + LONG;
        do {
            memcpy(&word0, p, 8);
            memcpy(&word1, p + LONG, 8);
            memcpy(&word2, p + 2 * LONG, 8);
            crc0 = _mm_crc32_u64(crc0, word0);
            crc1 = _mm_crc32_u64(crc1, word1);
            crc2 = _mm_crc32_u64(crc2, word2);
            p += 8;
        } while (p < end);
        crc0 = shift(shift_long, (uint32_t)crc0) ^ (uint32_t)crc1;
        crc0 = shift(shift_long, (uint32_t)crc0) ^ (uint32_t)crc2;
        p += 2 * LONG;
        n -= 3 * LONG;
    }
    while (n >= 3 * SHORT) {
        crc1 = crc2 = 0;
        const unsigned char *end = p + SHORT;
        do {
            memcpy(&word0, p, 8);
            memcpy(&word1, p + SHORT, 8);
            memcpy(&word2, p + 2 * SHORT, 8);
            crc0 = _mm_crc32_u64(crc0, word0);
            crc1 = _mm_crc32_u64(crc1, word1);
            crc2 = _mm_crc32_u64(crc2, word2);
            p += 8;
        } while (p < end);
        crc0 = shift(shift_short, (uint32_t)crc0) ^ (uint32_t)crc1;
        crc0 = shift(shift_short, (uint32_t)crc0) ^ (uint32_t)crc2;
        p += 2 * SHORT;
        n -= 3 * SHORT;
    }
    while (n >= 8) {
        memcpy(&word0, p, 8);
        crc0 = _mm_crc32_u64(crc0, word0);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc0;
    while (n--) c = _mm_crc32_u8(c, *p++);
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

/* The data's checksum, without the GIL for long data (other reader threads go on). */
#define CRC_WITHOUT_GIL (32 * 1024)

static int data_ok(const unsigned char *data, size_t length, uint32_t expected) {
    uint32_t crc;
    if (length >= CRC_WITHOUT_GIL) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32c(data, length);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c(data, length);
    }
    return masked(crc) == expected;
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

static PyObject *crc32c_portable(PyObject *self, PyObject *args) {
    Py_buffer data;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    uint32_t crc = crc_table((const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *hardware_crc(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(crc32c != crc_table);
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
        if (!data_ok(data, (size_t)length, load32(data + length))) break;
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

/* A record at least this long, not yet whole in the store, is read straight into its bytes
 * object; a shorter one is framed out of the store after a large read (a second copy of a
 * short record costs less than a system call). */
#define DIRECT_MIN (16 * 1024)
/* Bytes read behind a record read directly: the next record's header and a little more. */
#define TAIL 4096
/* A length above this is checked against the file's size before its bytes object is made,
 * so a damaged-but-checksummed length never allocates more than the file holds. */
#define CHECK_SIZE_ABOVE ((uint64_t)1 << 26)

typedef struct {
    int fd;
    unsigned char *store;
    Py_ssize_t cap, pos, valid;
    off_t file_pos; /* the file offset of store[valid] */
} Frames;

/* Move the unread bytes to the front of the store and read behind them: > 0 bytes read,
 * 0 at the end of the file, -1 on a read error (left to the Python path to report). */
static Py_ssize_t refill(Frames *f) {
    Py_ssize_t kept = f->valid - f->pos;
    if (f->pos) memmove(f->store, f->store + f->pos, (size_t)kept);
    f->pos = 0;
    f->valid = kept;
    if (kept == f->cap) return -1; /* nothing fits: the caller checked, but never loop */
    ssize_t got;
    Py_BEGIN_ALLOW_THREADS
    do got = pread(f->fd, f->store + kept, (size_t)(f->cap - kept), f->file_pos);
    while (got < 0 && errno == EINTR);
    Py_END_ALLOW_THREADS
    if (got <= 0) return got < 0 ? -1 : 0;
    f->valid += got;
    f->file_pos += got;
    return got;
}

/* The record whose header is at store[pos] (length checked), read into its own bytes object:
 * the part already in the store is copied, the rest comes with one preadv that also fills the
 * store's first TAIL bytes with what follows. NULL with no exception when the file ends first
 * or the data's checksum does not match: the store is then emptied and positioned at the
 * record's start, so the Python path reads the record again and reports it. */
static PyObject *read_direct(Frames *f, uint64_t length) {
    Py_ssize_t have = f->valid - f->pos - 12; /* data bytes in the store, < length */
    off_t start = f->file_pos - (f->valid - f->pos);
    if (length > CHECK_SIZE_ABOVE) {
        off_t end = lseek(f->fd, 0, SEEK_END);
        if (end < 0 || (uint64_t)(end - f->file_pos) < length - (uint64_t)have + 4) goto reread;
    }
    PyObject *record = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)length);
    if (record == NULL) return NULL;
    unsigned char *data = (unsigned char *)PyBytes_AS_STRING(record);
    memcpy(data, f->store + f->pos + 12, (size_t)have);
    size_t need = (size_t)(length - (uint64_t)have), tail = f->cap < TAIL ? (size_t)f->cap : TAIL;
    size_t behind = 0;
    off_t at = f->file_pos;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    unsigned char *to = data + have;
    while (need) {
        struct iovec iov[2] = {{to, need}, {f->store, tail}};
        ssize_t got = preadv(f->fd, iov, 2, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ok = 0;
            break;
        }
        at += got;
        if ((size_t)got >= need) {
            behind = (size_t)got - need;
            need = 0;
        } else {
            to += got;
            need -= (size_t)got;
        }
    }
    while (ok && behind < 4) { /* the footer, when the first read stopped short of it */
        ssize_t got = pread(f->fd, f->store + behind, tail - behind, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ok = 0;
            break;
        }
        at += got;
        behind += (size_t)got;
    }
    if (ok) ok = masked(crc32c(data, (size_t)length)) == load32(f->store);
    Py_END_ALLOW_THREADS
    if (ok) {
        f->pos = 4;
        f->valid = (Py_ssize_t)behind;
        f->file_pos = at;
        return record;
    }
    Py_DECREF(record);
reread:
    f->pos = f->valid = 0;
    f->file_pos = start;
    return NULL;
}

/* read_frames(fd, store, pos, valid, file_pos, limit, max_bytes)
 *     -> (records, pos, valid, file_pos)
 * The next whole, intact records of the file open as ``fd`` (at most ``limit``, and no more
 * once ``max_bytes`` of file are taken), starting with the unread bytes store[pos:valid],
 * which the file holds just before ``file_pos``. It reads the file with pread (the file
 * object's own position is left alone) and returns where the store and the file stand after
 * the records returned. It stops before a record it cannot hand out whole and intact (the
 * end of the file, a bad checksum, a read error, a record that does not fit the store),
 * leaving it to the Python path, which reports it as it always does. */
static PyObject *read_frames(PyObject *self, PyObject *args) {
    Frames f;
    Py_buffer view;
    long long file_pos;
    Py_ssize_t limit, max_bytes;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*nnLnn", &f.fd, &view, &f.pos, &f.valid, &file_pos, &limit,
                          &max_bytes))
        return NULL;
    f.store = (unsigned char *)view.buf;
    f.cap = view.len;
    f.file_pos = (off_t)file_pos;
    if (f.cap < 16 || f.pos < 0 || f.pos > f.valid || f.valid > f.cap || file_pos < f.valid) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "read_frames: a store of at least 16 bytes with "
                                          "0 <= pos <= valid <= len(store) <= file_pos");
        return NULL;
    }
    PyObject *records = PyList_New(0);
    if (records == NULL) goto fail;
    Py_ssize_t taken = 0, bytes = 0;
    while (taken < limit && bytes < max_bytes) {
        Py_ssize_t avail = f.valid - f.pos;
        if (avail < 12) {
            if (refill(&f) <= 0) break;
            continue;
        }
        const unsigned char *head = f.store + f.pos;
        uint64_t length = load64(head);
        if (masked(crc32c(head, 8)) != load32(head + 8)) break;
        if (length > (uint64_t)(PY_SSIZE_T_MAX / 2)) break;
        Py_ssize_t total = 16 + (Py_ssize_t)length;
        PyObject *record;
        if (avail >= total) {
            const unsigned char *data = head + 12;
            if (!data_ok(data, (size_t)length, load32(data + length))) break;
            record = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)length);
            if (record == NULL) goto fail;
            f.pos += total;
        } else if (length >= DIRECT_MIN && (uint64_t)(avail - 12) < length) {
            record = read_direct(&f, length);
            if (record == NULL) {
                if (PyErr_Occurred()) goto fail;
                break;
            }
        } else {
            if (total > f.cap || refill(&f) <= 0) break;
            continue;
        }
        int failed = PyList_Append(records, record);
        Py_DECREF(record);
        if (failed) goto fail;
        taken++;
        bytes += total;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NnnL)", records, f.pos, f.valid, (long long)f.file_pos);
fail:
    Py_XDECREF(records);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"read_frames", read_frames, METH_VARARGS,
     "read_frames(fd, store, pos, valid, file_pos, limit, max_bytes) -> (records, pos, valid, "
     "file_pos): the next intact records of a local file, read with pread"},
    {"frame_records", frame_records, METH_VARARGS,
     "frame_records(buffer, pos, max_records) -> (intact records from pos, position after them)"},
    {"read_records", read_records, METH_VARARGS,
     "read_records(buffers, files, starts, ends) -> (records, first bad position or -1)"},
    {"crc32c", crc32c_value, METH_VARARGS, "CRC32C of a buffer (the fastest code this CPU has)"},
    {"crc32c_portable", crc32c_portable, METH_VARARGS,
     "CRC32C of a buffer by the table code used where SSE4.2 is missing (for tests)"},
    {"hardware_crc", hardware_crc, METH_NOARGS, "whether crc32c uses the SSE4.2 instruction"},
    {NULL, NULL, 0, NULL},
};

/* The tables and the choice of CRC code are filled once per process, before any module
 * object exists (pthread_once: a second interpreter importing it neither waits on a half-filled
 * table nor rewrites one that other threads read); afterwards they are only read. */
static void init_crc(void) {
    init_table();
#ifdef HAVE_HARDWARE_CRC
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        zeros_table(shift_long, LONG);
        zeros_table(shift_short, SHORT);
        crc32c = crc_hardware;
    }
#endif
}

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030D0000
    /* Read-only tables, and every call works on its own arguments: safe without the GIL. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tfrecord_fast", NULL, 0, methods,
                                    slots};

PyMODINIT_FUNC PyInit__tfrecord_fast(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_crc);
    return PyModuleDef_Init(&module);
}
