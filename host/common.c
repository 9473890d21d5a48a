// host/common.c: small file and path helpers (errors, allocation and the clock are in ../proc.c).
#include "common.h"
#include <sys/types.h>

void set_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int fmt_path(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return (len < 0 || (size_t)len >= n) ? -1 : 0;
}

long long file_size(FILE *f) {
    long long here = ftell(f);
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long long size = ftell(f);
    fseek(f, here, SEEK_SET);
    return size;
}

int read_at(FILE *f, long long offset, void *dst, size_t n) {
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0) return 0;
    return fread(dst, 1, n, f) == n;
}
