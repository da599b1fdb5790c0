/*
 * Native fast path of feedline.formats.example.parse_example: walks the protobuf wire format of
 * serialized tf.train.Example records directly and gathers the requested features into flat
 * buffers, without building protobuf message objects.
 *
 * Contract with the Python caller (feedline/formats/example/cbridge.py, _parse_native):
 *   parse_examples(records, plan) -> list | None
 *     records: a list of bytes (one serialized tf.train.Example each).
 *     plan:    a tuple of (name: bytes (UTF-8), kind: int, size: int, allow_missing: bool) per
 *              requested feature; kind 1 = bytes, 2 = float32, 3 = int64 (the field number of
 *              the list in the Feature oneof); size >= 0: a fixed number of values per record
 *              (FixedLenFeature), size == -1: any number (VarLenFeature and
 *              FixedLenSequenceFeature); allow_missing: whether a fixed feature may be missing
 *              (it has a default value).
 *   Returns one (values, aux) tuple per plan entry:
 *     values: bytearray of native int64 / float32 values, or a list of bytes objects;
 *     aux:    fixed features: a list of the indices of records that lack the feature (their
 *             values are zeros / None, for the caller to replace with the default value);
 *             var-len features: a bytearray of len(records) + 1 native int64 row splits.
 *   Returns None on ANY anomaly in the data: malformed or unusual wire data, a missing feature
 *   without a default, a list of the wrong kind, a wrong number of values. The caller then runs
 *   the protobuf-based implementation, which produces the result or the precise error. So this
 *   code never has to explain a failure, and may refuse anything it does not reproduce exactly:
 *   it is deliberately stricter than protobuf (see "Refused" below); refusing only costs time.
 *   It raises only for misuse of the function itself (wrong argument types) and MemoryError.
 *
 * Protobuf semantics reproduced (as upb, the parser behind the Python path, decodes them):
 *   - Example {1: Features}, Features {1: map<string, Feature>}: a map entry is a message
 *     {1: key, 2: value}; a later entry with the same key replaces an earlier one; Features
 *     appearing twice in an Example are merged, i.e. their entries are read in order.
 *   - Feature oneof {1: BytesList, 2: FloatList, 3: Int64List}; each list's field 1 is repeated
 *     (bytes; float as fixed32 or packed; int64 as varint or packed), every occurrence appends.
 *   - Unknown fields (wire types 0, 1, 2, 5) are skipped; every map key must be valid UTF-8
 *     (proto3 string); the values of features that were not requested are validated too (an
 *     invalid one makes protobuf reject the whole record).
 * Refused (returns None): wire types 3, 4, 6, 7 (groups, invalid); a known field with an
 *   unexpected wire type; field number 0; a tag above 32 bits; a varint over 10 bytes or whose
 *   10th byte exceeds 1; a length past the end of its message; a packed float payload whose size
 *   is not a multiple of 4; a packed varint payload not ending on a varint boundary; a Feature
 *   with more than one oneof field occurrence (protobuf would merge or switch); a map entry with
 *   a repeated or unknown field.
 *
 * Every read is bounds-checked, so random bytes never crash it (tests fuzz it). The GIL is
 * released while walking records and filling numeric buffers, so parallel map calls scale.
 * The records list is copied into a tuple first (PyList_AsTuple locks the list on a
 * free-threaded build), so another thread changing the caller's list cannot free a record
 * whose bytes are being read.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };
enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5 };

typedef struct {
    const uint8_t *name;
    Py_ssize_t name_len;
    int kind;
    Py_ssize_t size; /* -1: var-len */
    int allow_missing;
} Spec;

/* Where one record's value of one requested feature lies (the last entry with its key). */
typedef struct {
    const uint8_t *list; /* payload of the BytesList/FloatList/Int64List message */
    Py_ssize_t list_len;
    Py_ssize_t count; /* number of values */
    int kind;         /* KIND_NONE for a Feature without a list */
    int present;
} Slot;

/* ----------------------------------------------------------------------- wire primitives */
static int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) { /* the common one-byte case */
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return -1;
        uint8_t byte = *p++;
        if (i == 9 && byte > 1)
            return -1; /* bits past 64: upb drops them; refuse rather than imitate */
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = value;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static int read_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire_type)
{
    uint64_t tag;
    if (read_varint(pp, end, &tag) < 0 || tag > UINT32_MAX || (tag >> 3) == 0)
        return -1;
    *field = (uint32_t)(tag >> 3);
    *wire_type = (int)(tag & 7);
    return 0;
}

/* Reads a length prefix and checks the payload fits before end. */
static int read_length(const uint8_t **pp, const uint8_t *end, Py_ssize_t *length)
{
    uint64_t value;
    if (read_varint(pp, end, &value) < 0 || value > (uint64_t)(end - *pp))
        return -1;
    *length = (Py_ssize_t)value;
    return 0;
}

static int skip_field(const uint8_t **pp, const uint8_t *end, int wire_type)
{
    uint64_t ignored;
    Py_ssize_t length;
    switch (wire_type) {
    case WT_VARINT:
        return read_varint(pp, end, &ignored);
    case WT_FIXED64:
        if (end - *pp < 8)
            return -1;
        *pp += 8;
        return 0;
    case WT_LEN:
        if (read_length(pp, end, &length) < 0)
            return -1;
        *pp += length;
        return 0;
    case WT_FIXED32:
        if (end - *pp < 4)
            return -1;
        *pp += 4;
        return 0;
    default: /* groups (3, 4) and invalid wire types (6, 7) */
        return -1;
    }
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), at least as strict
 * as protobuf's check of string fields. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the first continuation byte */
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c == 0xE0) {
            more = 2;
            lo = 0xA0;
        }
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
            more = 2;
        else if (c == 0xED) {
            more = 2;
            hi = 0x9F;
        }
        else if (c == 0xF0) {
            more = 3;
            lo = 0x90;
        }
        else if (c >= 0xF1 && c <= 0xF3)
            more = 3;
        else if (c == 0xF4) {
            more = 3;
            hi = 0x8F;
        }
        else
            return 0;
        if (n - i <= more)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------------- list messages */
/* Walks a FloatList or Int64List payload: counts its values into *count and, when out is not
 * NULL, stores them there (native int64 or float32). */
static int walk_numeric(const uint8_t *p, const uint8_t *end, int kind, Py_ssize_t *count,
                        uint8_t *out)
{
    Py_ssize_t n = 0;
    while (p < end) {
        uint32_t field;
        int wire_type;
        if (read_tag(&p, end, &field, &wire_type) < 0)
            return -1;
        if (field != 1) {
            if (skip_field(&p, end, wire_type) < 0)
                return -1;
            continue;
        }
        if (kind == KIND_INT64 && wire_type == WT_VARINT) {
            uint64_t value;
            if (read_varint(&p, end, &value) < 0)
                return -1;
            if (out) {
                int64_t v = (int64_t)value;
                memcpy(out + 8 * n, &v, 8);
            }
            n++;
        }
        else if (kind == KIND_FLOAT && wire_type == WT_FIXED32) {
            if (end - p < 4)
                return -1;
            if (out) {
                uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                (uint32_t)p[3] << 24;
                memcpy(out + 4 * n, &bits, 4);
            }
            p += 4;
            n++;
        }
        else if (wire_type == WT_LEN) { /* packed */
            Py_ssize_t length;
            if (read_length(&p, end, &length) < 0)
                return -1;
            const uint8_t *stop = p + length;
            if (kind == KIND_FLOAT) {
                if (length % 4)
                    return -1;
                if (out) {
#if PY_LITTLE_ENDIAN
                    memcpy(out + 4 * n, p, (size_t)length);
#else
                    for (Py_ssize_t k = 0; k < length / 4; k++) {
                        const uint8_t *q = p + 4 * k;
                        uint32_t bits = (uint32_t)q[0] | (uint32_t)q[1] << 8 |
                                        (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
                        memcpy(out + 4 * (n + k), &bits, 4);
                    }
#endif
                }
                n += length / 4;
                p = stop;
            }
            else {
                while (p < stop) {
                    uint64_t value;
                    if (read_varint(&p, stop, &value) < 0)
                        return -1;
                    if (out) {
                        int64_t v = (int64_t)value;
                        memcpy(out + 8 * n, &v, 8);
                    }
                    n++;
                }
            }
        }
        else {
            return -1; /* field 1 with a wire type protobuf would keep as an unknown field */
        }
    }
    *count = n;
    return 0;
}

/* Walks a BytesList payload: counts its values and, when out is not NULL, stores new bytes
 * objects into out[start...] (needs the GIL then). */
static int walk_bytes(const uint8_t *p, const uint8_t *end, Py_ssize_t *count, PyObject *out,
                      Py_ssize_t start)
{
    Py_ssize_t n = 0;
    while (p < end) {
        uint32_t field;
        int wire_type;
        if (read_tag(&p, end, &field, &wire_type) < 0)
            return -1;
        if (field != 1) {
            if (skip_field(&p, end, wire_type) < 0)
                return -1;
            continue;
        }
        Py_ssize_t length;
        if (wire_type != WT_LEN || read_length(&p, end, &length) < 0)
            return -1;
        if (out) {
            PyObject *value = PyBytes_FromStringAndSize((const char *)p, length);
            if (!value)
                return -2;
            PyList_SET_ITEM(out, start + n, value);
        }
        p += length;
        n++;
    }
    *count = n;
    return 0;
}

/* -------------------------------------------------------------------------- the messages */
/* Feature: which list it holds and how many values (validating the list). */
static int scan_feature(const uint8_t *p, const uint8_t *end, Slot *slot)
{
    slot->kind = KIND_NONE;
    slot->list = NULL;
    slot->list_len = 0;
    slot->count = 0;
    while (p < end) {
        uint32_t field;
        int wire_type;
        if (read_tag(&p, end, &field, &wire_type) < 0)
            return -1;
        if (field < KIND_BYTES || field > KIND_INT64) {
            if (skip_field(&p, end, wire_type) < 0)
                return -1;
            continue;
        }
        Py_ssize_t length;
        /* A second oneof occurrence would be merged or switch the kind: leave it to protobuf. */
        if (wire_type != WT_LEN || slot->kind != KIND_NONE || read_length(&p, end, &length) < 0)
            return -1;
        slot->kind = (int)field;
        slot->list = p;
        slot->list_len = length;
        int status = field == KIND_BYTES
                         ? walk_bytes(p, p + length, &slot->count, NULL, 0)
                         : walk_numeric(p, p + length, (int)field, &slot->count, NULL);
        if (status < 0)
            return -1;
        p += length;
    }
    return 0;
}

/* One map entry {1: key, 2: value}: validates it and records it if its key is requested. */
static int scan_entry(const uint8_t *p, const uint8_t *end, const Spec *specs, Py_ssize_t nspecs,
                      Slot *slots)
{
    const uint8_t *key = p, *value = p;
    Py_ssize_t key_len = 0, value_len = 0;
    int has_key = 0, has_value = 0;
    while (p < end) {
        uint32_t field;
        int wire_type;
        Py_ssize_t length;
        if (read_tag(&p, end, &field, &wire_type) < 0 || wire_type != WT_LEN ||
            read_length(&p, end, &length) < 0)
            return -1;
        if (field == 1 && !has_key) {
            key = p;
            key_len = length;
            has_key = 1;
        }
        else if (field == 2 && !has_value) {
            value = p;
            value_len = length;
            has_value = 1;
        }
        else {
            return -1; /* repeated or unknown field in a map entry */
        }
        p += length;
    }
    if (!valid_utf8(key, key_len))
        return -1;
    Slot slot;
    if (scan_feature(value, value + value_len, &slot) < 0)
        return -1;
    for (Py_ssize_t f = 0; f < nspecs; f++) {
        if (specs[f].name_len == key_len && memcmp(specs[f].name, key, (size_t)key_len) == 0) {
            slot.present = 1;
            slots[f] = slot; /* a later entry with the same key wins, as in a protobuf map */
            break;
        }
    }
    return 0;
}

static int scan_features(const uint8_t *p, const uint8_t *end, const Spec *specs,
                         Py_ssize_t nspecs, Slot *slots)
{
    while (p < end) {
        uint32_t field;
        int wire_type;
        if (read_tag(&p, end, &field, &wire_type) < 0)
            return -1;
        if (field != 1) {
            if (skip_field(&p, end, wire_type) < 0)
                return -1;
            continue;
        }
        Py_ssize_t length;
        if (wire_type != WT_LEN || read_length(&p, end, &length) < 0 ||
            scan_entry(p, p + length, specs, nspecs, slots) < 0)
            return -1;
        p += length;
    }
    return 0;
}

static int scan_example(const uint8_t *p, const uint8_t *end, const Spec *specs,
                        Py_ssize_t nspecs, Slot *slots)
{
    while (p < end) {
        uint32_t field;
        int wire_type;
        if (read_tag(&p, end, &field, &wire_type) < 0)
            return -1;
        if (field != 1) {
            if (skip_field(&p, end, wire_type) < 0)
                return -1;
            continue;
        }
        Py_ssize_t length;
        /* Features appearing twice merge: their map entries simply continue. */
        if (wire_type != WT_LEN || read_length(&p, end, &length) < 0 ||
            scan_features(p, p + length, specs, nspecs, slots) < 0)
            return -1;
        p += length;
    }
    return 0;
}

/* ---------------------------------------------------------------------------- the batch */
typedef struct {
    PyObject *values; /* bytearray or list */
    PyObject *aux;    /* list of missing indices, or bytearray of row splits */
    Py_ssize_t total; /* number of values */
} Output;

/* Checks every record's slot against the spec and counts the values (no GIL needed). */
static int check_feature(const Spec *spec, const Slot *slots, Py_ssize_t nrecords,
                         Py_ssize_t nspecs, Py_ssize_t f, Py_ssize_t *total,
                         Py_ssize_t *missing)
{
    Py_ssize_t sum = 0, absent = 0;
    for (Py_ssize_t r = 0; r < nrecords; r++) {
        const Slot *slot = &slots[r * nspecs + f];
        if (!slot->present) {
            if (spec->size >= 0 && !spec->allow_missing)
                return -1;
            absent++;
            continue;
        }
        if (slot->kind != KIND_NONE && slot->kind != spec->kind)
            return -1;
        if (spec->size >= 0 && slot->count != spec->size)
            return -1;
        sum += slot->count;
    }
    if (spec->size >= 0) {
        if (spec->size > 0 && nrecords > PY_SSIZE_T_MAX / 8 / spec->size)
            return -1; /* absurd shape: let the Python path report it */
        sum = nrecords * spec->size;
    }
    *total = sum;
    *missing = absent;
    return 0;
}

/* Fills a numeric output (no GIL needed). */
static int fill_numeric(const Spec *spec, const Slot *slots, Py_ssize_t nrecords,
                        Py_ssize_t nspecs, Py_ssize_t f, uint8_t *values, int64_t *splits)
{
    const size_t itemsize = spec->kind == KIND_INT64 ? 8 : 4;
    Py_ssize_t position = 0;
    if (splits)
        splits[0] = 0;
    for (Py_ssize_t r = 0; r < nrecords; r++) {
        const Slot *slot = &slots[r * nspecs + f];
        Py_ssize_t count = 0;
        if (slot->present && slot->kind == spec->kind) {
            if (walk_numeric(slot->list, slot->list + slot->list_len, spec->kind, &count,
                             values + itemsize * (size_t)position) < 0 ||
                count != slot->count)
                return -1;
        }
        if (spec->size >= 0) {
            if (!slot->present)
                memset(values + itemsize * (size_t)position, 0, itemsize * (size_t)spec->size);
            position += spec->size;
        }
        else {
            position += count;
            splits[r + 1] = position;
        }
    }
    return 0;
}

/* Fills a bytes output (needs the GIL). Returns -2 with a Python error set. */
static int fill_bytes(const Spec *spec, const Slot *slots, Py_ssize_t nrecords,
                      Py_ssize_t nspecs, Py_ssize_t f, PyObject *values, int64_t *splits)
{
    Py_ssize_t position = 0;
    if (splits)
        splits[0] = 0;
    for (Py_ssize_t r = 0; r < nrecords; r++) {
        const Slot *slot = &slots[r * nspecs + f];
        Py_ssize_t count = 0;
        if (slot->present && slot->kind == KIND_BYTES) {
            int status = walk_bytes(slot->list, slot->list + slot->list_len, &count, values,
                                    position);
            if (status < 0)
                return status;
            if (count != slot->count)
                return -1;
        }
        if (spec->size >= 0) {
            if (!slot->present)
                for (Py_ssize_t k = 0; k < spec->size; k++) {
                    Py_INCREF(Py_None);
                    PyList_SET_ITEM(values, position + k, Py_None);
                }
            position += spec->size;
        }
        else {
            position += count;
            splits[r + 1] = position;
        }
    }
    return 0;
}

static int parse_plan(PyObject *plan, Spec **specs_out, Py_ssize_t *nspecs_out)
{
    Py_ssize_t nspecs = PyTuple_GET_SIZE(plan);
    Spec *specs = PyMem_Calloc(nspecs ? (size_t)nspecs : 1, sizeof(Spec));
    if (!specs) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t f = 0; f < nspecs; f++) {
        const char *name;
        Py_ssize_t name_len, size;
        int kind, allow_missing;
        PyObject *item = PyTuple_GET_ITEM(plan, f);
        if (!PyTuple_Check(item) ||
            !PyArg_ParseTuple(item, "y#inp", &name, &name_len, &kind, &size, &allow_missing)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError,
                                "plan entries must be (name, kind, size, allow_missing)");
            PyMem_Free(specs);
            return -1;
        }
        if (kind < KIND_BYTES || kind > KIND_INT64 || size < -1) {
            PyErr_Format(PyExc_ValueError, "bad plan entry %zd: kind %d, size %zd", f, kind,
                         size);
            PyMem_Free(specs);
            return -1;
        }
        specs[f] = (Spec){(const uint8_t *)name, name_len, kind, size, allow_missing};
    }
    *specs_out = specs;
    *nspecs_out = nspecs;
    return 0;
}

static PyObject *new_output_values(const Spec *spec, Py_ssize_t total)
{
    if (spec->kind == KIND_BYTES)
        return PyList_New(total);
    return PyByteArray_FromStringAndSize(NULL, total * (spec->kind == KIND_INT64 ? 8 : 4));
}

static PyObject *parse_examples(PyObject *module, PyObject *args)
{
    PyObject *records_arg, *plan_arg;
    if (!PyArg_ParseTuple(args, "O!O!:parse_examples", &PyList_Type, &records_arg,
                          &PyTuple_Type, &plan_arg))
        return NULL;
    PyObject *result = NULL;
    Spec *specs = NULL;
    Slot *slots = NULL;
    Output *outputs = NULL;
    const uint8_t **starts = NULL;
    Py_ssize_t *lengths = NULL;
    Py_ssize_t nspecs = 0;
    int failed = 0;
    /* Own the records: the GIL is released while reading their buffers. */
    PyObject *records = PyList_AsTuple(records_arg);
    if (!records)
        return NULL;
    Py_ssize_t nrecords = PyTuple_GET_SIZE(records);
    if (parse_plan(plan_arg, &specs, &nspecs) < 0)
        goto done;
    if (nspecs && (size_t)nrecords > PY_SSIZE_T_MAX / sizeof(Slot) / (size_t)nspecs) {
        PyErr_NoMemory();
        goto done;
    }
    slots = PyMem_Calloc((size_t)(nrecords * nspecs) + 1, sizeof(Slot));
    outputs = PyMem_Calloc((size_t)nspecs + 1, sizeof(Output));
    starts = PyMem_Calloc((size_t)nrecords + 1, sizeof(*starts));
    lengths = PyMem_Calloc((size_t)nrecords + 1, sizeof(*lengths));
    if (!slots || !outputs || !starts || !lengths) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < nrecords; r++) {
        PyObject *record = PyTuple_GET_ITEM(records, r);
        if (!PyBytes_Check(record)) {
            failed = 1; /* the Python path names the record and its type */
            goto done;
        }
        starts[r] = (const uint8_t *)PyBytes_AS_STRING(record);
        lengths[r] = PyBytes_GET_SIZE(record);
    }

    /* Pass 1: find and validate every requested feature of every record. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < nrecords && !failed; r++)
        failed = scan_example(starts[r], starts[r] + lengths[r], specs, nspecs,
                              &slots[r * nspecs]) < 0;
    for (Py_ssize_t f = 0; f < nspecs && !failed; f++) {
        Py_ssize_t missing;
        failed = check_feature(&specs[f], slots, nrecords, nspecs, f, &outputs[f].total,
                               &missing) < 0;
    }
    Py_END_ALLOW_THREADS
    if (failed)
        goto done;

    /* Allocate the outputs (GIL held). */
    for (Py_ssize_t f = 0; f < nspecs; f++) {
        const Spec *spec = &specs[f];
        outputs[f].values = new_output_values(spec, outputs[f].total);
        if (!outputs[f].values)
            goto done;
        if (spec->size >= 0) {
            outputs[f].aux = PyList_New(0);
            if (!outputs[f].aux)
                goto done;
            for (Py_ssize_t r = 0; r < nrecords; r++) {
                if (slots[r * nspecs + f].present)
                    continue;
                PyObject *index = PyLong_FromSsize_t(r);
                if (!index || PyList_Append(outputs[f].aux, index) < 0) {
                    Py_XDECREF(index);
                    goto done;
                }
                Py_DECREF(index);
            }
        }
        else {
            outputs[f].aux = PyByteArray_FromStringAndSize(NULL, (nrecords + 1) * 8);
            if (!outputs[f].aux)
                goto done;
        }
    }

    /* Pass 2a: numeric values (no GIL). */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t f = 0; f < nspecs && !failed; f++) {
        const Spec *spec = &specs[f];
        if (spec->kind == KIND_BYTES)
            continue;
        int64_t *splits = spec->size >= 0 ? NULL
                                          : (int64_t *)PyByteArray_AS_STRING(outputs[f].aux);
        failed = fill_numeric(spec, slots, nrecords, nspecs, f,
                              (uint8_t *)PyByteArray_AS_STRING(outputs[f].values), splits) < 0;
    }
    Py_END_ALLOW_THREADS
    if (failed)
        goto done;

    /* Pass 2b: bytes values (new objects: GIL held). */
    for (Py_ssize_t f = 0; f < nspecs; f++) {
        const Spec *spec = &specs[f];
        if (spec->kind != KIND_BYTES)
            continue;
        int64_t *splits = spec->size >= 0 ? NULL
                                          : (int64_t *)PyByteArray_AS_STRING(outputs[f].aux);
        int status = fill_bytes(spec, slots, nrecords, nspecs, f, outputs[f].values, splits);
        if (status == -2)
            goto done;
        if (status < 0) {
            failed = 1;
            goto done;
        }
    }

    result = PyList_New(nspecs);
    if (!result)
        goto done;
    for (Py_ssize_t f = 0; f < nspecs; f++) {
        PyObject *pair = PyTuple_Pack(2, outputs[f].values, outputs[f].aux);
        if (!pair) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, f, pair);
    }

done:
    if (outputs)
        for (Py_ssize_t f = 0; f < nspecs; f++) {
            Py_XDECREF(outputs[f].values);
            Py_XDECREF(outputs[f].aux);
        }
    PyMem_Free(outputs);
    PyMem_Free(slots);
    PyMem_Free(starts);
    PyMem_Free(lengths);
    PyMem_Free(specs);
    Py_DECREF(records);
    if (failed && !PyErr_Occurred() && !result)
        Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"parse_examples", parse_examples, METH_VARARGS,
     "parse_examples(records, plan) -> list of (values, aux) per feature, or None to fall back "
     "to the protobuf path (see the comment at the top of _example_fast.c)."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#if PY_VERSION_HEX >= 0x030D0000
    /* No state of its own: it reads a tuple snapshot of the records (immutable bytes) and the
     * plan (a tuple), and writes only objects it made, so it is safe without the GIL. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "feedline.formats._example_fast",
    "Native fast path of feedline.formats.example.parse_example (optional; see example.py).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__example_fast(void) { return PyModuleDef_Init(&module_def); }
