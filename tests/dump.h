/*
dump.h: reader for the PyTorch activation dump written by tests/reference/gpt2_reference.py.
Header-only; the format is documented in docs/DUMP_FORMAT.md.

    Dump dump;
    char err[256];
    if (dump_open(&dump, "tests/reference/dumps/tiny.dump", err, sizeof(err)) != 0) { fprintf(stderr, "%s\n", err); exit(1); }
    const DumpRecord *logits = dump_find(&dump, "logits");   // NULL when absent
    // logits->f is (B,T,V) float32, logits->dims = {B, T, V, 0}, logits->numel = B*T*V
    dump_free(&dump);

dump_open reads the whole file into memory and validates all of it before returning: the magic
and version, the header fields, and every record's name, dtype, ndim and dims, and that the records
exactly fill the file (size arithmetic is overflow-checked, trailing bytes are an error). Afterwards
every record's data pointer is safe to read for numel elements. The file is little-endian, like
every machine this project runs on.
*/
#ifndef DUMP_H
#define DUMP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include "../host/readfile.h"
#include <math.h>

#define DUMP_MAGIC 20241129
#define DUMP_VERSION 1
#define DUMP_HEADER_INTS 256
#define DUMP_NAME_BYTES 64
#define DUMP_MAX_DIMS 4
#define DUMP_FLOAT32 0
#define DUMP_INT32 1
// a record on disk: name[64], then int32 dtype, ndim, dims[4], then numel * 4 bytes of data
#define DUMP_RECORD_HEADER_BYTES (DUMP_NAME_BYTES + (2 + DUMP_MAX_DIMS) * 4)

typedef struct {
    const char *name;    // NUL-terminated, points into the file buffer
    int dtype;           // DUMP_FLOAT32 or DUMP_INT32
    int ndim;            // 0 (a scalar) .. 4
    int dims[DUMP_MAX_DIMS]; // dims[ndim..3] are 0
    size_t numel;        // product of dims[0..ndim-1]; 1 for a scalar
    const float *f;      // the data when dtype == DUMP_FLOAT32, else NULL
    const int32_t *i;    // the data when dtype == DUMP_INT32, else NULL
} DumpRecord;

typedef struct {
    // the run the dump describes
    int B, T, L, C, NH, V, Vp, maxT;
    int nsteps;          // training steps recorded in step_tokens / train_*
    int num_records;
    int warmup;          // warmup steps
    int seed;            // init seed (meaningless when the model came from --load)
    int compute_bits;    // 64 or 32: the precision the reference computed in
    // training hyper-parameters (float32 in the header)
    float lr, final_frac, weight_decay, grad_clip, beta1, beta2, eps;
    DumpRecord *records; // num_records entries, in file order
    unsigned char *buffer; // the whole file
    size_t buffer_bytes;
} Dump;

static inline int32_t dump_int_at(const unsigned char *p) {
    int32_t value;
    memcpy(&value, p, 4); // memcpy: no alignment or aliasing assumptions
    return value;
}

static inline float dump_float_at(const unsigned char *p) {
    float value;
    memcpy(&value, p, 4);
    return value;
}

// releases what dump_open allocated; safe on a zeroed or already freed Dump
static inline void dump_free(Dump *d) {
    free(d->records);
    free(d->buffer);
    memset(d, 0, sizeof(*d));
}

// reads the whole file into d->buffer; returns 0 or -1 with a message
static inline int dump_read_file(Dump *d, const char *path, char *err, size_t errlen) {
    return read_whole_file(path, "dump file", &d->buffer, &d->buffer_bytes, err, errlen);
}

// parses and checks the 256-int32 header
static inline int dump_parse_header(Dump *d, const char *path, char *err, size_t errlen) {
    if (d->buffer_bytes < DUMP_HEADER_INTS * 4) {
        return read_fail(err, errlen, "%s: file is %zu bytes, too short for the %d-byte dump header",
                         path, d->buffer_bytes, DUMP_HEADER_INTS * 4);
    }
    const unsigned char *h = d->buffer;
    int32_t magic = dump_int_at(h), version = dump_int_at(h + 4);
    if (magic != DUMP_MAGIC) {
        return read_fail(err, errlen, "%s: bad magic %d, expected %d (not an activation dump)",
                         path, magic, DUMP_MAGIC);
    }
    if (version != DUMP_VERSION) {
        return read_fail(err, errlen, "%s: unsupported dump version %d, expected %d", path, version, DUMP_VERSION);
    }
    int *fields[] = {&d->B, &d->T, &d->L, &d->C, &d->NH, &d->V, &d->Vp, &d->maxT, &d->nsteps,
                     &d->num_records, &d->warmup, &d->seed, &d->compute_bits};
    const char *names[] = {"B", "T", "L", "C", "NH", "V", "Vp", "maxT", "nsteps",
                           "num_records", "warmup", "seed", "compute_bits"};
    for (int k = 0; k < 13; k++) {
        *fields[k] = dump_int_at(h + 4 * (2 + k));
        int minimum = (k >= 9) ? 0 : 1; // shapes are positive; counts and the seed may be 0
        if (*fields[k] < minimum) {
            return read_fail(err, errlen, "%s: header field %s = %d is invalid", path, names[k], *fields[k]);
        }
    }
    if (d->C % d->NH != 0 || d->Vp < d->V || d->T > d->maxT ||
        (d->compute_bits != 32 && d->compute_bits != 64)) {
        return read_fail(err, errlen, "%s: inconsistent header (C=%d NH=%d V=%d Vp=%d T=%d maxT=%d bits=%d)",
                         path, d->C, d->NH, d->V, d->Vp, d->T, d->maxT, d->compute_bits);
    }
    float *hyper[] = {&d->lr, &d->final_frac, &d->weight_decay, &d->grad_clip, &d->beta1, &d->beta2, &d->eps};
    for (int k = 0; k < 7; k++) {
        *hyper[k] = dump_float_at(h + 4 * (16 + k));
        if (!isfinite(*hyper[k])) {
            return read_fail(err, errlen, "%s: header hyper-parameter %d is not finite", path, k);
        }
    }
    return 0;
}

// parses the record at *offset, checks it fits the file, advances *offset past its data
static inline int dump_parse_record(Dump *d, int index, size_t *offset, const char *path,
                                    char *err, size_t errlen) {
    size_t remaining = d->buffer_bytes - *offset;
    if (remaining < DUMP_RECORD_HEADER_BYTES) {
        return read_fail(err, errlen, "%s: truncated: record %d of %d starts %zu bytes before the end",
                         path, index, d->num_records, remaining);
    }
    const unsigned char *p = d->buffer + *offset;
    DumpRecord *r = &d->records[index];
    if (memchr(p, '\0', DUMP_NAME_BYTES) == NULL || p[0] == '\0') {
        return read_fail(err, errlen, "%s: record %d: name is empty or not NUL-terminated", path, index);
    }
    r->name = (const char *)p;
    r->dtype = dump_int_at(p + DUMP_NAME_BYTES);
    r->ndim = dump_int_at(p + DUMP_NAME_BYTES + 4);
    if (r->dtype != DUMP_FLOAT32 && r->dtype != DUMP_INT32) {
        return read_fail(err, errlen, "%s: record '%s': unknown dtype %d", path, r->name, r->dtype);
    }
    if (r->ndim < 0 || r->ndim > DUMP_MAX_DIMS) {
        return read_fail(err, errlen, "%s: record '%s': ndim %d is not in 0..%d", path, r->name, r->ndim, DUMP_MAX_DIMS);
    }
    // numel = product of the dims, refusing any product whose byte size would overflow size_t
    size_t numel = 1;
    for (int k = 0; k < DUMP_MAX_DIMS; k++) {
        int dim = dump_int_at(p + DUMP_NAME_BYTES + 8 + 4 * k);
        r->dims[k] = dim;
        if (k >= r->ndim) {
            if (dim != 0) { return read_fail(err, errlen, "%s: record '%s': unused dim %d is %d, not 0", path, r->name, k, dim); }
            continue;
        }
        if (dim < 0) { return read_fail(err, errlen, "%s: record '%s': dim %d is negative (%d)", path, r->name, k, dim); }
        if (dim > 0 && numel > SIZE_MAX / 4 / (size_t)dim) {
            return read_fail(err, errlen, "%s: record '%s': dims overflow the size computation", path, r->name);
        }
        numel *= (size_t)dim;
    }
    size_t data_bytes = numel * 4;
    if (data_bytes > remaining - DUMP_RECORD_HEADER_BYTES) {
        return read_fail(err, errlen, "%s: truncated: record '%s' needs %zu data bytes, %zu remain",
                         path, r->name, data_bytes, remaining - DUMP_RECORD_HEADER_BYTES);
    }
    r->numel = numel;
    const unsigned char *data = p + DUMP_RECORD_HEADER_BYTES; // 4-byte aligned: all sizes are multiples of 4
    r->f = (r->dtype == DUMP_FLOAT32) ? (const float *)data : NULL;
    r->i = (r->dtype == DUMP_INT32) ? (const int32_t *)data : NULL;
    *offset += DUMP_RECORD_HEADER_BYTES + data_bytes;
    for (int k = 0; k < index; k++) {
        if (strcmp(d->records[k].name, r->name) == 0) {
            return read_fail(err, errlen, "%s: record name '%s' appears twice", path, r->name);
        }
    }
    return 0;
}

// opens and fully validates a dump; returns 0, or -1 with a one-line message in err (d is then empty)
static inline int dump_open(Dump *d, const char *path, char *err, size_t errlen) {
    memset(d, 0, sizeof(*d));
    if (dump_read_file(d, path, err, errlen) != 0 || dump_parse_header(d, path, err, errlen) != 0) {
        dump_free(d);
        return -1;
    }
    // every record takes at least its 88-byte header, which bounds num_records before allocating
    size_t offset = DUMP_HEADER_INTS * 4;
    if ((size_t)d->num_records > (d->buffer_bytes - offset) / DUMP_RECORD_HEADER_BYTES) {
        int n = d->num_records;
        size_t bytes = d->buffer_bytes;
        dump_free(d);
        return read_fail(err, errlen, "%s: truncated: header promises %d records, the file is only %zu bytes",
                         path, n, bytes);
    }
    d->records = (DumpRecord *)calloc(d->num_records > 0 ? (size_t)d->num_records : 1, sizeof(DumpRecord));
    if (d->records == NULL) { dump_free(d); return read_fail(err, errlen, "%s: out of memory", path); }
    for (int k = 0; k < d->num_records; k++) {
        if (dump_parse_record(d, k, &offset, path, err, errlen) != 0) { dump_free(d); return -1; }
    }
    if (offset != d->buffer_bytes) {
        size_t extra = d->buffer_bytes - offset;
        dump_free(d);
        return read_fail(err, errlen, "%s: %zu trailing bytes after the last record", path, extra);
    }
    return 0;
}

// the record called name, or NULL
static inline const DumpRecord *dump_find(const Dump *d, const char *name) {
    for (int k = 0; k < d->num_records; k++) {
        if (strcmp(d->records[k].name, name) == 0) { return &d->records[k]; }
    }
    return NULL;
}

// the record called name if it has this dtype and shape (ndim dims given in dims), else NULL with
// a message: what a test calls before trusting a record's layout
static inline const DumpRecord *dump_get(const Dump *d, const char *name, int dtype, int ndim,
                                         const int *dims, char *err, size_t errlen) {
    const DumpRecord *r = dump_find(d, name);
    if (r == NULL) { read_fail(err, errlen, "dump has no record '%s'", name); return NULL; }
    int same = (r->dtype == dtype && r->ndim == ndim);
    for (int k = 0; same && k < ndim; k++) { same = (r->dims[k] == dims[k]); }
    if (!same) {
        read_fail(err, errlen, "record '%s' is dtype %d shape (%d,%d,%d,%d)[ndim %d], expected dtype %d ndim %d",
                  name, r->dtype, r->dims[0], r->dims[1], r->dims[2], r->dims[3], r->ndim, dtype, ndim);
        return NULL;
    }
    return r;
}

#endif // DUMP_H
