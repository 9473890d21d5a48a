// host/fileio.c: durable files and directory creation (see fileio.h).
#include "fileio.h"
#include "common.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

void parent_dir(const char *path, char *dir, size_t n) {
    fmt_path(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) fmt_path(dir, n, ".");
    else if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
}

int commit_file(FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(saved ? saved : errno));
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        set_err(err, errlen, "cannot rename %s to %s (%s)", tmp, path, strerror(errno));
        remove(tmp);
        return -1;
    }
    char dir[4096];
    parent_dir(path, dir, sizeof dir);
    fsync_dir(dir);   // best effort: some file systems refuse fsync on directories
    return 0;
}

int make_dirs(const char *dir) {
    char path[4096];
    if (fmt_path(path, sizeof path, "%s", dir) != 0) { errno = ENAMETOOLONG; return -1; }
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(path, 0755) != 0 && errno != EEXIST) ? -1 : 0;
}
