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
#include <fcntl.h>
#include <unistd.h>

// What a non-regular file is, for messages: "a FIFO", "a folder", ...
static inline const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

// Opens path for reading only if it is a regular file, without ever blocking: the open itself is
// non-blocking (a FIFO with no writer would otherwise hang the reader forever), then fstat decides.
// Returns the FILE, or NULL with `why` (when given) saying what went wrong: strerror(errno), or
// "not a regular file (it is a FIFO)"; errno stays that of the failed open (ENOENT: no such file).
static inline FILE *open_regular_file(const char *path, char *why, size_t whylen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (why != NULL && whylen > 0) snprintf(why, whylen, "%s", strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (why != NULL && whylen > 0) snprintf(why, whylen, "%s, not a regular file", file_kind(st.st_mode));
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (f == NULL) {
        if (why != NULL && whylen > 0) snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
    }
    return f;
}

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
    char why[128];
    FILE *f = open_regular_file(path, why, sizeof why);
    if (f == NULL) return read_fail(err, errlen, "%s: cannot open %s (%s)", path, what, why);
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return read_fail(err, errlen, "%s: cannot open %s (%s)", path, what, strerror(errno));
    }
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
