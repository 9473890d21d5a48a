// host/stop.c: stopping a run before its last step: the signal handlers, the collective check that
// makes every rank stop at the same point, and the stop itself (a checkpoint of the last whole
// step with -o, one line saying how to resume, the exit status 128 + the signal).
#include "trainer.h"
#include "fileio.h"
#include <signal.h>
#include <unistd.h>

// ------------------------------------------------------------------------------------------------
// Preemption: SIGTERM (what Slurm and other schedulers send before they preempt a job) or SIGINT
// asks the run to stop. The handler only records the signal (async-signal-safe: a flag and a
// write); after each step (and between micro-steps, validation batches and sampled tokens) every
// rank adds its flag in one scalar all-reduce, so all ranks stop at the same point, write a
// checkpoint of the last whole step (with -o) and exit non-zero. A second signal ends the
// process at once, by the signal's default action.
// A handler gets no argument, so what it reaches is the file's: the signal it recorded, and
// whether this rank is the one that says so (written once, before the handlers are installed).
static volatile sig_atomic_t g_stop_signal = 0;
static int g_stop_quiet;   // not rank 0: the handler's line is rank 0's

// After the stop, the shutdown (MPI_Finalize) gets this long; then the rank exits with the stop's
// status by itself (proc_exit_after): mpirun on SIGTERM no longer serves MPI_Finalize.
#define STOP_EXIT_GRACE_S 10.0

static void on_stop_signal(int sig) {
    if (g_stop_signal) {   // the second one: stop now, leaving no temp file behind (unlink only: async-signal-safe)
        output_remove_pending();
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop_signal = sig;
    static const char msg[] = "\nstop requested: stopping at the next step, micro-step, validation batch or sampled "
                              "token, then a checkpoint (with -o) and exit; a second signal stops at once\n";
    if (!g_stop_quiet) { ssize_t k = write(STDERR_FILENO, msg, sizeof msg - 1); (void)k; }
}

static int stop_signal_arrived(void) { return g_stop_signal != 0; }

void install_stop_handlers(const Zero3Backend *be) {
    g_stop_quiet = be->rank != 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);   // mpirun forwards SIGUSR1 to every rank (SIGTERM it acts on itself)
    if (be->stop_source) be->stop_source(be->ctx, stop_signal_arrived);   // its waits (an emulated link's hold) end early on it
}

// Collective: did any rank get a stop signal? (One scalar all-reduce: the long loops ask it at every
// batch or token, so every rank leaves them at the same point.)
int trainer_stop_requested(const Trainer *tr) {
    return tr->be->all_reduce_scalar(tr->be->ctx, g_stop_signal ? 1.0 : 0.0) > 0.0;
}

// Collective: did any rank get a stop signal? Then the exit status every rank uses, 128 + the
// highest signal number any rank got (all ranks agree on it), else 0.
static int trainer_stop_status(const Trainer *tr) {
    const Zero3Backend *be = tr->be;
    if (!trainer_stop_requested(tr)) return 0;
    int sig = SIGINT;
    const int sigs[] = {SIGTERM, SIGUSR1};
    for (int i = 0; i < 2; i++)
        if (be->all_reduce_scalar(be->ctx, g_stop_signal == sigs[i] ? 1.0 : 0.0) > 0.0 && sigs[i] > sig) sig = sigs[i];
    return 128 + sig;
}

static const char *signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGINT ? "SIGINT" : "a signal";
}

// Stops the run on a stop signal (every rank, collective): saves the state after `whole` steps
// (unless just saved), says when it stopped (`when`) and how to resume, and returns `status`.
static int trainer_stop(Trainer *tr, const TrainLoop *loop, int whole, int status, const char *when) {
    const TrainArgs *a = &tr->args;
    if (a->out_dir && loop->saved_step != whole) trainer_checkpoint(tr, whole);
    char trace[4200], trace_note[4400] = "";
    trace_close(tr->measure.trace, trace, sizeof trace);   // the steps so far: a resumed run's trace never replaces it
    tr->measure.trace = NULL;
    if (trace[0]) fmt_path(trace_note, sizeof trace_note, "; the trace of these steps is %s (a resumed run's trace goes to "
                           "a new numbered file beside it)", trace);
    if (tr->be->rank == 0) {
        fflush(stdout);
        if (a->out_dir)
            fprintf(stderr, "stopped by %s %s: checkpoint %s/%s is complete; resume with the same command and -y 1%s\n",
                    signal_name(status - 128), when, a->out_dir, tr->output.last_ckpt, trace_note);
        else
            fprintf(stderr, "stopped by %s %s; nothing was saved (-o DIR keeps a checkpoint to resume from)%s\n",
                    signal_name(status - 128), when, trace_note);
        fflush(stderr);
    }
    // no rank exits before rank 0 has printed: mpirun ends the job when the first rank exits non-zero
    tr->be->all_reduce_scalar(tr->be->ctx, 0.0);
    proc_exit_after(STOP_EXIT_GRACE_S, status);   // the checkpoint is complete: the shutdown may not be
    return status;
}

// After a whole step: a stop signal on some rank (collective) stops the run there; 0 to go on.
int trainer_stop_if_asked(Trainer *tr, const TrainLoop *loop, int step) {
    int status = step + 1 < tr->args.steps ? trainer_stop_status(tr) : 0;
    if (!status) return 0;
    char when[96];
    snprintf(when, sizeof when, "after step %d of %d", step + 1, tr->args.steps);
    return trainer_stop(tr, loop, step + 1, status, when);
}

// A step a stop signal gave up between micro-steps: the run stops with the steps before it; the
// resumed run runs this step again from its first micro-step (same data, same result).
int trainer_stop_in_step(Trainer *tr, const TrainLoop *loop, const StepResult *r) {
    char when[160];
    snprintf(when, sizeof when, "during step %d of %d, after %d of its %d micro-steps (the resumed run does the step "
             "again)", r->step + 1, tr->args.steps, r->given_up_after, tr->A);
    return trainer_stop(tr, loop, r->step, trainer_stop_status(tr), when);
}

