// host/fileio.c: durable files and directory creation (see fileio.h).
#include "fileio.h"
#include "common.h"
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
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

static int g_lock_fd = -1;
static char g_lock_path[4200];

static void dir_unlock(void) {
    if (g_lock_fd < 0) return;
    unlink(g_lock_path);   // before close: a process that opened it meanwhile sees the inode change
    close(g_lock_fd);
    g_lock_fd = -1;
}

int dir_lock(const char *dir, char *msg, size_t n) {
    if (fmt_path(g_lock_path, sizeof g_lock_path, "%s/.lock", dir) != 0) { set_err(msg, n, "path too long"); return -1; }
    for (int attempt = 0; attempt < 10; attempt++) {
        int fd = open(g_lock_path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0) { set_err(msg, n, "cannot create %s (%s)", g_lock_path, strerror(errno)); return -1; }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            set_err(msg, n, "%s is not a regular file", g_lock_path);
            close(fd);
            return -1;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            char info[256] = "";
            ssize_t k = pread(fd, info, sizeof info - 1, 0);
            info[k > 0 ? k : 0] = '\0';
            info[strcspn(info, "\n")] = '\0';
            close(fd);
            if (e == EWOULDBLOCK) { set_err(msg, n, "%s", info[0] ? info : "a process that has not said who it is yet"); return 1; }
            if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) { set_err(msg, n, "%s: no file locks here (%s)", g_lock_path, strerror(e)); return 2; }
            set_err(msg, n, "cannot lock %s (%s)", g_lock_path, strerror(e));
            return -1;
        }
        // the previous holder may have removed the file between our open and our lock: then this
        // lock is on a dead inode, and a third process may hold the live one. Try again.
        struct stat now;
        if (stat(g_lock_path, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) { close(fd); continue; }
        char host[256] = "?", when[64] = "?";
        gethostname(host, sizeof host - 1);
        time_t t = time(NULL);
        struct tm tm;
        if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        if (ftruncate(fd, 0) == 0) dprintf(fd, "pid %d on host %s, started %s\n", (int)getpid(), host, when);
        g_lock_fd = fd;
        atexit(dir_unlock);
        return 0;
    }
    set_err(msg, n, "cannot lock %s: it keeps being replaced", g_lock_path);
    return -1;
}
