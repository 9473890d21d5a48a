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
struct OutputFiles {
    struct { dev_t dev; ino_t ino; char what[96]; } inputs[MAX_INPUTS];   // input_note's
    int ninputs;
    char pending[MAX_PENDING][4200];   // temp files not yet committed ("" = free slot)
    struct { int fd; char path[4200]; } lock;   // DIR/.lock while held (dir_lock; fd -1: none)
    struct { char path[4200]; dev_t dev; ino_t ino; int held; } dir;   // the output folder by identity (dir_hold)
};

// The OutputFiles whose pending temp files the exit and a second stop signal remove (fileio.h).
static OutputFiles *g_exit_files;

static void dir_unlock(OutputFiles *o);

static void remove_pending(OutputFiles *o) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (o->pending[i][0]) { unlink(o->pending[i]); o->pending[i][0] = '\0'; }
}

void output_remove_pending(void) {
    if (g_exit_files) remove_pending(g_exit_files);
}

// At exit, however the process exits: the handed files' temp files go, and their lock.
static void output_files_at_exit(void) {
    if (!g_exit_files) return;
    remove_pending(g_exit_files);
    dir_unlock(g_exit_files);
}

OutputFiles *output_files_new(void) {
    static int at_exit_registered;   // atexit once per process: the handler follows g_exit_files
    OutputFiles *o = xcalloc(1, sizeof(OutputFiles));
    o->lock.fd = -1;
    if (!g_exit_files) g_exit_files = o;
    if (!at_exit_registered) { atexit(output_files_at_exit); at_exit_registered = 1; }
    return o;
}

void output_files_free(OutputFiles *o) {
    if (!o) return;
    remove_pending(o);
    dir_unlock(o);
    if (g_exit_files == o) g_exit_files = NULL;
    free(o);
}

void input_note(OutputFiles *o, const char *path, const char *what) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || o->ninputs == MAX_INPUTS) return;
    o->inputs[o->ninputs].dev = st.st_dev;
    o->inputs[o->ninputs].ino = st.st_ino;
    fmt_path(o->inputs[o->ninputs].what, sizeof o->inputs[0].what, "%s", what);
    o->ninputs++;
}

int output_check(const OutputFiles *o, const char *path, const char *flag, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;   // not there yet (or a dangling link: the rename replaces it)
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, "%s: %s is not a regular file (it is %s)", flag, path, file_kind(st.st_mode));
        return -1;
    }
    for (int i = 0; i < o->ninputs; i++)
        if (o->inputs[i].dev == st.st_dev && o->inputs[i].ino == st.st_ino) {
            set_err(err, errlen, "%s: %s is %s: an output never replaces an input; give another path", flag, path, o->inputs[i].what);
            return -1;
        }
    return 0;
}

void output_pending_add(OutputFiles *o, const char *path) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (!o->pending[i][0]) { fmt_path(o->pending[i], sizeof o->pending[i], "%s", path); return; }
}

void output_pending_forget(OutputFiles *o, const char *path) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (o->pending[i][0] && !strcmp(o->pending[i], path)) o->pending[i][0] = '\0';
}

FILE *output_begin(OutputFiles *o, const char *path, char *tmp, size_t tmplen, char *err, size_t errlen) {
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
    output_pending_add(o, tmp);
    return f;
}

void output_abandon(OutputFiles *o, FILE *f, const char *tmp) {
    if (f) fclose(f);
    unlink(tmp);
    output_pending_forget(o, tmp);
}

// Flushes f to the disk: 0, or -1 with a message naming tmp.
static int output_flush(FILE *f, const char *tmp, char *err, size_t errlen) {
    errno = 0;
    if (fflush(f) == 0 && !ferror(f) && fsync(fileno(f)) == 0) return 0;
    set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno ? errno : EIO));
    return -1;
}

// Renames the complete tmp over path (a non-regular path refused) and makes the rename durable.
static int output_rename(OutputFiles *o, const char *tmp, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
        set_err(err, errlen, "cannot rename %s to %s (%s)", tmp, path, S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
        return -1;
    }
    if (rename(tmp, path) != 0) { set_err(err, errlen, "cannot rename %s to %s (%s)", tmp, path, strerror(errno)); return -1; }
    output_pending_forget(o, tmp);
    char dir[4096];
    parent_dir(path, dir, sizeof dir);
    fsync_dir(dir);   // best effort: some file systems refuse fsync on directories
    return 0;
}

int commit_file(OutputFiles *o, FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    int ok = output_flush(f, tmp, err, errlen) == 0;
    if (fclose(f) != 0 && ok) { set_err(err, errlen, "%s: write failed (%s)", tmp, strerror(errno)); ok = 0; }
    if (!ok || output_rename(o, tmp, path, err, errlen) != 0) { output_abandon(o, NULL, tmp); return -1; }
    return 0;
}

int publish_file(OutputFiles *o, FILE *f, const char *tmp, const char *path, char *err, size_t errlen) {
    if (output_flush(f, tmp, err, errlen) != 0 || output_rename(o, tmp, path, err, errlen) != 0) return -1;
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

static void dir_unlock(OutputFiles *o) {
    if (o->lock.fd < 0) return;
    // before close: a process that opened it meanwhile sees the inode change. Only our own file: a
    // folder moved away under this run may have a new run's .lock at the old path now.
    struct stat mine, there;
    if (fstat(o->lock.fd, &mine) == 0 && stat(o->lock.path, &there) == 0 && mine.st_ino == there.st_ino && mine.st_dev == there.st_dev)
        unlink(o->lock.path);
    close(o->lock.fd);
    o->lock.fd = -1;
}

int dir_lock(OutputFiles *o, const char *dir, char *msg, size_t n) {
    char *const lock_path = o->lock.path;
    if (fmt_path(lock_path, sizeof o->lock.path, "%s/.lock", dir) != 0) { set_err(msg, n, "path too long"); return -1; }
    for (int attempt = 0; attempt < 10; attempt++) {
        int fd = open(lock_path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0) { set_err(msg, n, "cannot create %s (%s)", lock_path, strerror(errno)); return -1; }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            set_err(msg, n, "%s is not a regular file", lock_path);
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
            if (e == ENOLCK || e == EOPNOTSUPP || e == ENOSYS) { set_err(msg, n, "%s: no file locks here (%s)", lock_path, strerror(e)); return 2; }
            set_err(msg, n, "cannot lock %s (%s)", lock_path, strerror(e));
            return -1;
        }
        // the previous holder may have removed the file between our open and our lock: then this
        // lock is on a dead inode, and a third process may hold the live one. Try again.
        struct stat now;
        if (stat(lock_path, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) { close(fd); continue; }
        char host[256] = "?", when[64] = "?";
        gethostname(host, sizeof host - 1);
        time_t t = time(NULL);
        struct tm tm;
        if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        if (ftruncate(fd, 0) == 0) dprintf(fd, "pid %d on host %s, started %s\n", (int)getpid(), host, when);
        o->lock.fd = fd;   // dropped by output_files_free, or at exit
        return 0;
    }
    set_err(msg, n, "cannot lock %s: it keeps being replaced", lock_path);
    return -1;
}

// ------------------------------------------------------------------------------------------------
// The output folder by identity: a path can come to name another folder (the run's folder renamed
// away, a new one made under the old name); the device and inode cannot.

int dir_hold(OutputFiles *o, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    fmt_path(o->dir.path, sizeof o->dir.path, "%s", dir);
    o->dir.dev = st.st_dev;
    o->dir.ino = st.st_ino;
    o->dir.held = 1;
    return 0;
}

int dir_moved(const OutputFiles *o) {
    if (!o->dir.held) return 0;
    struct stat st;
    return stat(o->dir.path, &st) != 0 || st.st_dev != o->dir.dev || st.st_ino != o->dir.ino;
}
