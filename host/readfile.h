// readfile.h: the two pieces every file reader here needs (tokens.h, tokenizer.h, dump.h): a one-line
// error message into the caller's buffer, and reading a whole regular file into memory.
// Header-only, C and C++.
#ifndef READFILE_H
#define READFILE_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// Writes a message into err (when given) and returns -1, so checks read `return read_fail(...)`.
static inline int read_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(err, errlen, fmt, args);
        va_end(args);
    }
    return -1;
}

// Reads the whole regular file at path into a malloc'd buffer (*out, *size). `what` names the kind of
// file in messages ("tokenizer file"). Returns 0, or -1 with a one-line message naming the file.
static inline int read_whole_file(const char *path, const char *what, unsigned char **out, size_t *size,
                                  char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) return read_fail(err, errlen, "%s: cannot open %s (%s)", path, what, strerror(errno));
    if (!S_ISREG(st.st_mode)) return read_fail(err, errlen, "%s: not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return read_fail(err, errlen, "%s: cannot open %s (%s)", path, what, strerror(errno));
    size_t n = (size_t)st.st_size;
    unsigned char *buf = (unsigned char *)malloc(n > 0 ? n : 1);
    if (buf == NULL) {
        fclose(f);
        return read_fail(err, errlen, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        free(buf);
        return read_fail(err, errlen, "%s: read %zu of %zu bytes", path, got, n);
    }
    *out = buf;
    *size = n;
    return 0;
}

#endif
