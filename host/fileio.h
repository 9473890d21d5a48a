// host/fileio.h: the one rule for every file the program writes (docs/operations.md), directory
// creation, and the output folder held by identity.
//
// The rule, for checkpoints, model.bin, log.csv and the trace alike:
//   1. inputs first: an output path that names an input (the same file by device and inode, not by
//      name) or a file that is not a regular file (a FIFO, a folder, a device) is refused, checked
//      without opening it, so nothing ever blocks on it;
//   2. beside, then rename: the bytes go to a fresh temp file beside the final name (created with
//      O_EXCL after removing a stale regular one, so no other file is ever written through it),
//      flushed, fsynced and renamed into place only when complete;
//   3. cleanup: a temp file not yet committed is removed on every failure path (an error, a
//      second stop signal), so nothing half-written is left behind.
//
// What the rule keeps (the inputs noted, the temp files not yet committed, the output folder's lock
// and identity) is the run's OutputFiles, owned by the trainer (one per run) and passed to every
// call here. The exit and a second stop signal must also remove the pending temp files, and neither
// takes an argument: the process's first OutputFiles lends its pending list to them (until it is
// freed), the one thing here that no context holds.
#pragma once
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct OutputFiles OutputFiles;
OutputFiles *output_files_new(void);
void output_files_free(OutputFiles *o);   // removes its pending temp files and drops its lock (NULL: nothing)

int fsync_dir(const char *dir);                            // best effort; 0 or -1
void parent_dir(const char *path, char *dir, size_t n);    // "a/b/c" -> "a/b", "c" -> "."
int make_dirs(const char *dir);                            // mkdir -p; 0, or -1 with errno set

// ---- the rule
// Remembers an input file (by device and inode; a path that does not exist is skipped), with the
// words that name it in a message ("the model file of -e").
void input_note(OutputFiles *o, const char *path, const char *what);
// Step 1 for `path`, an output named by `flag`: 0, or -1 with one message ("flag -tr: X is the model
// file of -e: ..."). A path that does not exist yet is fine.
int output_check(const OutputFiles *o, const char *path, const char *flag, char *err, size_t errlen);
// Step 2's start: a fresh temp file beside path (into tmp, tmplen bytes), opened for writing and
// registered for removal until it is committed or abandoned. NULL, with a message, on failure.
FILE *output_begin(OutputFiles *o, const char *path, char *tmp, size_t tmplen, char *err, size_t errlen);
// Step 2's end: flush, fsync, close, rename tmp to path, fsync the directory. 0, or -1 with a
// message (the temp file is removed). A path that exists and is not a regular file is refused.
int commit_file(OutputFiles *o, FILE *f, const char *tmp, const char *path, char *err, size_t errlen);
// The same, but f stays open on the renamed file (log.csv keeps taking rows after it is published).
int publish_file(OutputFiles *o, FILE *f, const char *tmp, const char *path, char *err, size_t errlen);
// Step 3 by hand: closes f (when given) and removes tmp.
void output_abandon(OutputFiles *o, FILE *f, const char *tmp);
// Registers a file this process creates under another scheme (the trace's parts) for removal on
// failure, and forgets it again once it is taken care of.
void output_pending_add(OutputFiles *o, const char *path);
void output_pending_forget(OutputFiles *o, const char *path);
// Removes every registered file of the OutputFiles handed to the exit (async-signal-safe: unlink
// only): what a second stop signal calls; also run at exit.
void output_remove_pending(void);

// ---- the output folder, held by identity
// One run per output folder: takes DIR/.lock with flock (exclusive, non-blocking) and holds it for
// the life of the run (until output_files_free, or the exit); the kernel drops it when the process
// dies, however it dies. The file says who holds it ("pid P on host H, started T"); letting it go
// removes it (only if the path still names this lock's file). Returns 0 (held), 1 when another process holds it (msg: that line), 2
// when the file system has no locks (msg: why; the run goes on unlocked), -1 on an error (msg).
int dir_lock(OutputFiles *o, const char *dir, char *msg, size_t n);
// Every rank: remembers which folder DIR is now (device and inode). 0, or -1 (errno).
int dir_hold(OutputFiles *o, const char *dir);
// Does DIR still name the folder dir_hold saw? 1 when it was moved or replaced meanwhile (or is
// gone), 0 when it is the same (or nothing is held).
int dir_moved(const OutputFiles *o);

#ifdef __cplusplus
}
#endif
