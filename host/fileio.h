// host/fileio.h: durable files (write PATH.tmp, fsync, rename over PATH, fsync the directory) and
// directory creation, for checkpoints, the export and the log.
#pragma once
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

int fsync_dir(const char *dir);                            // best effort; 0 or -1
void parent_dir(const char *path, char *dir, size_t n);    // "a/b/c" -> "a/b", "c" -> "."
// Finishes a file opened on tmp: flush, fsync, close, rename to path, fsync its directory.
// Returns 0, or -1 with a message (the temp file is removed).
int commit_file(FILE *f, const char *tmp, const char *path, char *err, size_t errlen);
int make_dirs(const char *dir);                            // mkdir -p; 0, or -1 with errno set

// One run per output folder: takes DIR/.lock with flock (exclusive, non-blocking) and holds it for
// the life of the process; the kernel drops it when the process dies, however it dies. The file
// says who holds it ("pid P on host H, started T"); a clean exit removes it. Returns 0 (held), 1
// when another process holds it (msg: that line), 2 when the file system has no locks (msg: why;
// the run goes on unlocked), -1 on an error (msg).
int dir_lock(const char *dir, char *msg, size_t n);

#ifdef __cplusplus
}
#endif
