// host/fileio.c: durable files and directory creation (see fileio.h).
#include "fileio.h"
#include "common.h"
#include "readfile.h"
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

// ------------------------------------------------------------------------------------------------
// The rule: inputs first, beside then rename, cleanup on failure.

#define MAX_INPUTS 8
#define MAX_PENDING 16
static struct { dev_t dev; ino_t ino; char what[96]; } g_inputs[MAX_INPUTS];
static int g_ninputs;
static char g_pending[MAX_PENDING][4200];   // temp files not yet committed ("" = free slot)

void input_note(const char *path, const char *what) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || g_ninputs == MAX_INPUTS) return;
    g_inputs[g_ninputs].dev = st.st_dev;
    g_inputs[g_ninputs].ino = st.st_ino;
    fmt_path(g_inputs[g_ninputs].what, sizeof g_inputs[0].what, "%s", what);
    g_ninputs++;
}

int output_check(const char *path, const char *flag, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;   // not there yet (or a dangling link: the rename replaces it)
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: %s is not a regular file (it is %s)", flag, path, file_kind(st.st_mode));
        return -1;
    }
    for (int i = 0; i < g_ninputs; i++)
        if (g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino) {
            set_err(err, errlen, "%s: %s is %s: an output never replaces an input; give another path", flag, path, g_inputs[i].what);
            return -1;
        }
    return 0;
}

void output_pending_add(const char *path) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (!g_pending[i][0]) { fmt_path(g_pending[i], sizeof g_pending[i], "%s", path); return; }
}

void output_pending_forget(const char *path) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (g_pending[i][0] && !strcmp(g_pending[i], path)) g_pending[i][0] = '\0';
}

void output_remove_pending(void) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (g_pending[i][0]) { unlink(g_pending[i]); g_pending[i][0] = '\0'; }
}

FILE *output_begin(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen) {
    static int cleanup_registered;
    if (!cleanup_registered) { atexit(output_remove_pending); cleanup_registered = 1; }
    if (fmt_path(tmp, tmplen, "%s.tmp", path) != 0) { set_err(err, errlen, "%s: the path is too long", path); return NULL; }
    struct stat st;
    if (lstat(tmp, &st) == 0) {   // left by a crash: a regular file goes, anything else is not ours to touch
        if (!S_ISREG(st.st_mode)) { set_err(err, errlen, "%s is %s, not a temp file this program left", tmp, file_kind(st.st_mode)); return NULL; }
        unlink(tmp);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        set_err(err, errlen, "cannot create %s (%s)", tmp, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        return NULL;
    }
    output_pending_add(tmp);
    return f;
}

void output_abandon(FILE *f, const char *tmp) {
    if (f) fclose(f);
    unlink(tmp);
    output_pending_forget(tmp);
}

// Flushes f to the disk: 0, or -1 with a message naming tmp.
static int output_flush(FILE *f, const char *tmp, char *err, size_t errlen) {
    errno = 0;
    if (fflush(f) == 0 && !ferror(f) && fsync(fileno(f)) == 0) return 0;
    set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno ? errno : EIO));
    return -1;
}

// Renames the complete tmp over path (a non-regular path refused) and makes the rename durable.
static int output_rename(const char *tmp, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        set_err(err, errlen, "cannot rename %s to %s (%s)", tmp, path, S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
        return -1;
    }
    if (rename(tmp, path) != 0) { set_err(err, errlen, "cannot rename %s to %s (%s)", tmp, path, strerror(errno)); return -1; }
    output_pending_forget(tmp);
    char dir[4096];
    parent_dir(path, dir, sizeof dir);
    fsync_dir(dir);   // best effort: some file systems refuse fsync on directories
    return 0;
}

int commit_file(FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    int ok = output_flush(f, tmp, err, errlen) == 0;
    if (fclose(f) != 0 && ok) { set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno)); ok = 0; }
    if (!ok || output_rename(tmp, path, err, errlen) != 0) { output_abandon(NULL, tmp); return -1; }
    return 0;
}

int publish_file(FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    if (output_flush(f, tmp, err, errlen) != 0 || output_rename(tmp, path, err, errlen) != 0) return -1;
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
    // before close: a process that opened it meanwhile sees the inode change. Only our own file: a
    // folder moved away under this run may have a new run's .lock at the old path now.
    struct stat mine, there;
    if (fstat(g_lock_fd, &mine) == 0 && stat(g_lock_path, &there) == 0 && mine.st_ino == there.st_ino && mine.st_dev == there.st_dev)
        unlink(g_lock_path);
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

// ------------------------------------------------------------------------------------------------
// The output folder by identity: a path can come to name another folder (the run's folder renamed
// away, a new one made under the old name); the device and inode cannot.

static struct { char path[4200]; dev_t dev; ino_t ino; int held; } g_dir;

int dir_hold(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    fmt_path(g_dir.path, sizeof g_dir.path, "%s", dir);
    g_dir.dev = st.st_dev;
    g_dir.ino = st.st_ino;
    g_dir.held = 1;
    return 0;
}

int dir_moved(void) {
    if (!g_dir.held) return 0;
    struct stat st;
    return stat(g_dir.path, &st) != 0 || st.st_dev != g_dir.dev || st.st_ino != g_dir.ino;
}
