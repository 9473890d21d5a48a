// test_engine_contract.c: the engine against the contract written out by hand, not against its own
// tables (ZERO3_STAGE_LAYOUT) or its own theory (zero3_theory_*), which a wrong row would agree with.
//
//  1. The stage table and each variant's placements, as docs/DESIGN.md section 2 states them, typed
//     in below: for every stage (and persistence, HSDP, -ra 0) the placement of each unit's params,
//     grads and optimizer state, its state between steps, and the resident bytes of a two-unit model
//     worked out by hand (100 and 1000 parameters, 4 ranks, align 1, fp32 and bf16).
//  2. The collectives of one step, counted by a backend double: how many all-gathers,
//     reduce-scatters and all-reduces each stage and variant issues, by hand.
//  3. The step-end invariant after a departure from the recorded schedule: a unit prefetched and then
//     not used is dropped at the optimizer step, and zero3_check_step_end (on here) finds every unit
//     at rest, no handle kept.
//  4. A step given up between micro-steps (a stop signal): after zero3_step_abandon every unit is
//     at rest and every buffer and handle returned, at every stage, and the next step runs whole.
//  5. A unit's state after every verb, written out by hand from zero3.h's tables: plain stage 3,
//     -ra 0 (KEPT from the forward until its gradients are handed over) and a unit used across
//     phases the way GPT-2's tied embedding is, with the ledger row of every gather (the phase is the
//     caller's word: a backward's gather is bwd_gather). The engine runs in check mode, where every
//     change of a params state not in zero3.h's table of moves stops it.
//  6. The exposed communication against an independent clock: a backend whose every wait sleeps
//     WAIT_MS and whose compute sleeps COMPUTE_MS; the engine's exposed time must be the number of
//     waits times WAIT_MS (and so not the compute, and not twice the waits), and the step's timeline
//     must fit inside a wall clock read around it.
//  7. Both state machines' tables of moves (params, gradients) against zero3.h's drawings, typed in
//     below pair by pair; and check mode stopping on a move a table does not list: a gradient
//     reduction in flight whose unit is found IDLE when it is retired (a bug planted by the test, in
//     a child process) must end in the setter's line, and the same steps without the plant must not.
#include "recording_backend.h"
#include "../../observe/zero3_observe.h"
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 4.0
#define COMPUTE_MS 6.0

static int n_gather, n_reduce_scatter, n_all_reduce, n_wait, clocked;
static double waited_ms, computed_ms;   // the double's own clock: what the sleeps really took
// sleeps ms and returns how long it really slept (a loaded machine oversleeps), by its own clock
static double sleep_ms(double ms) {
    struct timespec ts = {0, (long)(ms * 1e6)}, a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    while (nanosleep(&ts, &ts) != 0) {}
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) * 1e-6;
}
static void *c_all_gather(void *ctx, const void *shard, void *full, size_t n, Zero3DType t) { n_gather++; return (void *)(intptr_t)1; }
static void *c_reduce_scatter(void *ctx, const void *full, void *shard, size_t n, Zero3DType t) { n_reduce_scatter++; return (void *)(intptr_t)1; }
static void *c_all_reduce(void *ctx, void *buf, size_t n, Zero3DType t) { n_all_reduce++; return (void *)(intptr_t)1; }
static void c_wait(void *ctx, void *h) { n_wait++; if (clocked) waited_ms += sleep_ms(WAIT_MS); }
static void c_make_groups(void *ctx, int g) {}
static void *c_replica(void *ctx, void *buf, size_t n, Zero3DType t) { return (void *)(intptr_t)1; }
// the clock: stamps are the host clock at the call (the CPU backend's meaning)
static double stamp_t[4096];
static int nstamps;
static int c_stamp(void *ctx) { stamp_t[nstamps] = now_seconds(); return nstamps++; }
static void c_comm_stamps(void *ctx, int *b, int *e) { *b = c_stamp(ctx); *e = c_stamp(ctx); }
static void c_stamps_read(void *ctx, double *s, int n) { if (s) for (int i = 0; i < n; i++) s[i] = stamp_t[i]; nstamps = 0; }

typedef struct { int stage, world, group; size_t persist; int keep; Zero3DType pt; } Case;

static void make(Zero3 *z, Zero3Backend *be, Case c) {
    *be = recording_backend();
    be->rank = 1; be->world = c.world;
    be->all_gather_start = c_all_gather; be->reduce_scatter_start = c_reduce_scatter;
    be->all_reduce_start = c_all_reduce; be->wait = c_wait;
    be->make_groups = c_make_groups; be->replica_all_reduce_start = c_replica;
    be->stamp = c_stamp; be->comm_stamps = c_comm_stamps; be->stamps_read = c_stamps_read;
    Zero3Config cfg = {.stage = c.stage, .prefetch_depth = 0, .align = 1, .param_type = c.pt, .grad_type = c.pt,
                       .persist_threshold = c.persist, .reshard_after_forward = !c.keep, .shard_group = c.group,
                       .observer = &ZERO3_OBSERVER};
    zero3_init(z, be, &cfg);
    const char *n0[] = {"small"}, *n1[] = {"big"};
    size_t s0[] = {100}, s1[] = {1000};
    int d[] = {1};
    zero3_add_unit(z, "small", 1, n0, s0, d);
    zero3_add_unit(z, "big", 1, n1, s1, d);
    zero3_allocate(z);
}

// One training step, one micro-step: forward over both units, backward in reverse, norm, AdamW.
static void one_step(Zero3 *z, double compute_ms) {
    zero3_step_begin(z);
    zero3_micro_begin(z, 0, 1, ZERO3_PASS_TRAIN);
    for (int u = 0; u < 2; u++) { zero3_pre_forward(z, u); computed_ms += sleep_ms(compute_ms); zero3_post_forward(z, u); }
    for (int u = 1; u >= 0; u--) { zero3_pre_backward(z, u); computed_ms += sleep_ms(compute_ms); zero3_post_backward(z, u); }
    zero3_grad_norm(z);
    zero3_optimizer_step(z, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
}

static const char *P(Zero3Placement p) { return p == ZERO3_SHARDED ? "sharded" : "full"; }

// 1 + 2: placements, resident bytes and one step's collectives, each against the figures by hand
static void check_contract(const char *name, Case c, const char *want_small, const char *want_big,
                           size_t want_bytes, int want_gathers, int want_rs, int want_ar) {
    Zero3 z; Zero3Backend be;
    make(&z, &be, c);
    char got[2][64];
    for (int u = 0; u < 2; u++) {
        const Zero3Unit *U = &z.units[u];
        snprintf(got[u], sizeof got[u], "%s %s %s %s", P(U->layout.params), P(U->layout.grads),
                 P(U->layout.optimizer), U->param_state == ZERO3_PARAMS_SHARDED ? "SHARDED" : "RESIDENT");
    }
    CHECK(!strcmp(got[0], want_small), "%s: the small unit is '%s', the contract says '%s'", name, got[0], want_small);
    CHECK(!strcmp(got[1], want_big), "%s: the big unit is '%s', the contract says '%s'", name, got[1], want_big);
    CHECK(z.resident.bytes == want_bytes, "%s: %zu resident bytes, by hand %zu", name, z.resident.bytes, want_bytes);
    n_gather = n_reduce_scatter = n_all_reduce = 0;
    one_step(&z, 0.0);
    CHECK(n_gather == want_gathers && n_reduce_scatter == want_rs && n_all_reduce == want_ar,
          "%s: one step issued %d all-gathers, %d reduce-scatters, %d all-reduces; by hand %d, %d, %d", name,
          n_gather, n_reduce_scatter, n_all_reduce, want_gathers, want_rs, want_ar);
    printf("  %-26s small: %-34s big: %-34s %6zu bytes  %d/%d/%d collectives\n", name, got[0], got[1],
           z.resident.bytes, n_gather, n_reduce_scatter, n_all_reduce);
    zero3_free(&z);
}

// Step 1 records the order (small, big; big, small). Step 2 gathers small, whose prefetch starts
// big's gather; then asks for small again (a departure), so big is never used and must be dropped.
static void check_departure(void) {
    Zero3 z; Zero3Backend be;
    Case c = {3, 4, 0, 0, 0, ZERO3_F32};
    make(&z, &be, c);
    z.cfg.prefetch_depth = 1;
    z.step.check_steps = 1;
    one_step(&z, 0.0);
    zero3_step_begin(&z);
    zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
    zero3_post_forward(&z, (zero3_pre_forward(&z, 0), 0));
    CHECK(z.units[1].param_state == ZERO3_PARAMS_GATHERING, "departure: the big unit is not prefetched");
    zero3_pre_forward(&z, 0);   // the departure
    zero3_post_forward(&z, 0);
    zero3_pre_backward(&z, 0);
    zero3_post_backward(&z, 0);
    zero3_grad_norm(&z);
    zero3_optimizer_step(&z, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 2);   // checks the step's end
    CHECK(z.step.checked_steps == 2, "departure: the step-end invariant ran %d times, not 2", z.step.checked_steps);
    printf("  a prefetched unit left unused by a departure from the schedule: dropped, the step-end invariant holds\n");
    zero3_free(&z);
}

// Step 1 whole (2 micro-steps, recording the schedule); step 2 given up after its first micro-step,
// its last reductions still in flight; the invariant must hold at once, and step 3 must run whole.
static void check_abandon(int stage) {
    Zero3 z; Zero3Backend be;
    Case c = {stage, 4, 0, 0, 0, ZERO3_F32};
    make(&z, &be, c);
    z.cfg.prefetch_depth = 1;
    z.step.check_steps = 1;
    for (int step = 1; step <= 3; step++) {
        zero3_step_begin(&z);
        for (int k = 0; k < 2; k++) {
            zero3_micro_begin(&z, k, 2, ZERO3_PASS_TRAIN);
            for (int u = 0; u < 2; u++) { zero3_pre_forward(&z, u); zero3_post_forward(&z, u); }
            for (int u = 1; u >= 0; u--) { zero3_pre_backward(&z, u); zero3_post_backward(&z, u); }
            if (step == 2) break;   // the stop signal
        }
        if (step == 2) {
            zero3_step_abandon(&z);
            zero3_check_step_end(&z);   // dies, naming what is still busy, when the abandon left anything
            continue;
        }
        zero3_grad_norm(&z);
        zero3_optimizer_step(&z, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, step);
    }
    CHECK(z.step.checked_steps == 3, "abandon, stage %d: the step-end invariant ran %d times, not 3", stage, z.step.checked_steps);
    printf("  stage %d: a step given up after 1 of 2 micro-steps leaves every unit at rest; the next runs whole\n", stage);
    zero3_free(&z);
}

// One expectation of section 5: after `verb`, unit u holds params in state `params` with `holders`
// callers, grads in state `grads`, and the step so far issued `fwd` forward and `bwd` backward gathers.
static const char *const PARAMS[] = {"RESIDENT", "SHARDED", "GATHERING", "GATHERED", "KEPT"};
static const char *const GRADS[] = {"IDLE", "ACCUMULATING", "REDUCING"};
static void expect(const Zero3 *z, const char *name, const char *verb, int u, Zero3ParamState params, int holders,
                   Zero3GradState grads, int fwd, int bwd) {
    const Zero3Unit *U = &z->units[u];
    const Zero3LedgerRow *row = z->observe.stats.ledger.row;
    CHECK(U->param_state == params && U->holders == holders && U->grad_state == grads,
          "%s, after %s: unit %s is params %s (%d holders), grads %s; by hand params %s (%d holders), grads %s", name, verb,
          U->name, PARAMS[U->param_state], U->holders, GRADS[U->grad_state], PARAMS[params], holders, GRADS[grads]);
    CHECK(row[ZERO3_COLL_FWD_GATHER].count == fwd && row[ZERO3_COLL_BWD_GATHER].count == bwd,
          "%s, after %s: %.0f forward and %.0f backward gathers so far; by hand %d and %d", name, verb,
          row[ZERO3_COLL_FWD_GATHER].count, row[ZERO3_COLL_BWD_GATHER].count, fwd, bwd);
}

enum { SMALL = 0, BIG = 1 };
static void check_lifecycle(int keep) {
    const char *name = keep ? "stage 3, -ra 0" : "stage 3";
    Zero3 z; Zero3Backend be;
    make(&z, &be, (Case){3, 4, 0, 0, keep, ZERO3_F32});
    z.step.check_steps = 1;
    const Zero3ParamState after_forward = keep ? ZERO3_PARAMS_KEPT : ZERO3_PARAMS_SHARDED;
    const int bwd_gathers = keep ? 0 : 1;   // -ra 0: the backward finds the unit KEPT
    zero3_step_begin(&z);
    zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
    zero3_pre_forward(&z, BIG);
    expect(&z, name, "pre_forward(big)", BIG, ZERO3_PARAMS_GATHERED, 1, ZERO3_GRADS_IDLE, 1, 0);
    zero3_post_forward(&z, BIG);
    expect(&z, name, "post_forward(big)", BIG, after_forward, 0, ZERO3_GRADS_IDLE, 1, 0);
    // the small unit as GPT-2's tied embedding: gathered twice in the forward, the second held into
    // the backward, which opens its gradients with zero3_grads and releases it before they are reduced
    zero3_pre_forward(&z, SMALL);
    zero3_post_forward(&z, SMALL);
    expect(&z, name, "pre/post_forward(small)", SMALL, after_forward, 0, ZERO3_GRADS_IDLE, 2, 0);
    zero3_pre_forward(&z, SMALL);
    expect(&z, name, "pre_forward(small), again", SMALL, ZERO3_PARAMS_GATHERED + keep, 1, ZERO3_GRADS_IDLE, keep ? 2 : 3, 0);
    zero3_grads(&z, SMALL);
    expect(&z, name, "zero3_grads(small)", SMALL, ZERO3_PARAMS_GATHERED + keep, 1, ZERO3_GRADS_ACCUMULATING, keep ? 2 : 3, 0);
    zero3_release(&z, SMALL);
    expect(&z, name, "zero3_release(small)", SMALL, after_forward, 0, ZERO3_GRADS_ACCUMULATING, keep ? 2 : 3, 0);
    zero3_pre_backward(&z, BIG);
    expect(&z, name, "pre_backward(big)", BIG, ZERO3_PARAMS_GATHERED + keep, 1, ZERO3_GRADS_ACCUMULATING, keep ? 2 : 3,
           bwd_gathers);
    zero3_post_backward(&z, BIG);
    expect(&z, name, "post_backward(big)", BIG, ZERO3_PARAMS_SHARDED, 0, ZERO3_GRADS_REDUCING, keep ? 2 : 3, bwd_gathers);
    zero3_reduce_grads(&z, SMALL);   // its gradients handed over: a KEPT unit is done with its params
    expect(&z, name, "zero3_reduce_grads(small)", SMALL, ZERO3_PARAMS_SHARDED, 0, ZERO3_GRADS_REDUCING, keep ? 2 : 3,
           bwd_gathers);
    expect(&z, name, "zero3_reduce_grads(small)", BIG, ZERO3_PARAMS_SHARDED, 0, ZERO3_GRADS_IDLE, keep ? 2 : 3, bwd_gathers);
    // the caller names the phase: a gather for the backward is a backward gather, whatever came before
    zero3_gather(&z, BIG, ZERO3_FOR_BACKWARD);
    expect(&z, name, "zero3_gather(big, backward)", BIG, ZERO3_PARAMS_GATHERED, 1, ZERO3_GRADS_IDLE, keep ? 2 : 3,
           bwd_gathers + 1);
    zero3_release(&z, BIG);
    zero3_grad_norm(&z);
    expect(&z, name, "zero3_grad_norm", SMALL, ZERO3_PARAMS_SHARDED, 0, ZERO3_GRADS_IDLE, keep ? 2 : 3, bwd_gathers + 1);
    zero3_optimizer_step(&z, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);   // checks the step's end
    printf("  %-15s every verb leaves the state zero3.h's tables say (%s between forward and backward)\n", name,
           PARAMS[after_forward]);
    zero3_free(&z);
}

// One clocked step; returns 0 and says why in `why` when a bound fails. A loaded machine can
// preempt the process between the engine's stamp and the double's sleep (milliseconds that count
// as exposed but not as waited), so the caller retries: an engine that counts the compute, or the
// waits twice, misses by COMPUTE_MS or WAIT_MS a wait on every try, never by chance on one.
static int clocked_step_fits(Zero3 *z, int stage, char *why, size_t why_len) {
    clocked = 1; n_wait = 0; waited_ms = computed_ms = 0;
    double t0 = now_seconds();
    one_step(z, COMPUTE_MS);
    double wall = now_seconds() - t0;
    clocked = 0;
    int n;
    const Zero3Event *ev = zero3_timeline_read(z, &n);
    double exposed_ms = z->observe.stats.exposed_s * 1e3;
    // the engine's wait spans enclose the double's sleeps, with a few stamps' overhead; the compute
    // spans between them must not count
    if (!(n_wait >= 2 && exposed_ms >= waited_ms && exposed_ms <= waited_ms + 0.2 * n_wait + 0.5)) {
        snprintf(why, why_len, "stage %d: exposed %.2f ms, the clock says %d waits took %.2f ms", stage, exposed_ms, n_wait, waited_ms);
        return 0;
    }
    double first = 1e30, last = -1e30, compute_ms = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].t_begin < first) first = ev[i].t_begin;
        if (ev[i].t_end > last) last = ev[i].t_end;
        if (ev[i].t_end < ev[i].t_begin) { snprintf(why, why_len, "stage %d: event %d ends before it begins", stage, i); return 0; }
        if (ev[i].type == ZERO3_EV_FORWARD || ev[i].type == ZERO3_EV_BACKWARD) compute_ms += 1e3 * (ev[i].t_end - ev[i].t_begin);
    }
    if (!(n > 0 && first >= t0 && last - first <= wall)) {
        snprintf(why, why_len, "stage %d: the timeline (%.2f ms) leaves the wall clock (%.2f ms)", stage, 1e3 * (last - first), 1e3 * wall);
        return 0;
    }
    if (!(compute_ms >= computed_ms && compute_ms <= computed_ms + 1.0)) {
        snprintf(why, why_len, "stage %d: compute spans %.2f ms, the clock says %.2f ms", stage, compute_ms, computed_ms);
        return 0;
    }
    snprintf(why, why_len, "stage %d: %d waits of %.0f ms took %.2f ms: exposed %.2f ms; compute %.2f ms (the clock: %.2f); wall %.2f ms",
             stage, n_wait, WAIT_MS, waited_ms, exposed_ms, compute_ms, computed_ms, 1e3 * wall);
    return 1;
}

#define CLOCK_TRIES 5
static void check_exposed_clock(int stage) {
    Zero3 z; Zero3Backend be;
    Case c = {stage, 4, 0, 0, 0, ZERO3_F32};
    make(&z, &be, c);
    one_step(&z, 0.0);   // the first step records the schedule
    char why[256];
    int tries = 0, fits = 0;
    while (!fits && tries < CLOCK_TRIES) { fits = clocked_step_fits(&z, stage, why, sizeof why); tries++; }
    CHECK(fits, "%s (on each of %d tries)", why, CLOCK_TRIES);
    if (fits) printf("  %s%s\n", why, tries > 1 ? " (a try the machine's load disturbed, retried)" : "");
    zero3_free(&z);
}

// 7: the tables of moves, from zero3.h's drawings ("moves to"), and check mode stopping on one not listed
static void check_move_tables(void) {
    static const int params_by_hand[ZERO3_PARAMS_STATES][ZERO3_PARAMS_STATES] = {
        //   to: RESIDENT SHARDED GATHERING GATHERED KEPT
        [ZERO3_PARAMS_RESIDENT]  = {0, 0, 0, 0, 0},   // never moves
        [ZERO3_PARAMS_SHARDED]   = {0, 0, 1, 1, 0},   // GATHERING; GATHERED (one rank)
        [ZERO3_PARAMS_GATHERING] = {0, 0, 0, 1, 0},   // GATHERED
        [ZERO3_PARAMS_GATHERED]  = {0, 1, 0, 0, 1},   // SHARDED (freed); KEPT
        [ZERO3_PARAMS_KEPT]      = {0, 0, 0, 1, 0},   // GATHERED (its gradients handed over)
    };
    static const int grads_by_hand[ZERO3_GRADS_STATES][ZERO3_GRADS_STATES] = {
        //   to: IDLE ACCUMULATING REDUCING
        [ZERO3_GRADS_IDLE]         = {0, 1, 0},   // ACCUMULATING
        [ZERO3_GRADS_ACCUMULATING] = {1, 0, 1},   // REDUCING; IDLE (no collective in flight)
        [ZERO3_GRADS_REDUCING]     = {1, 0, 0},   // IDLE
    };
    for (int a = 0; a < ZERO3_PARAMS_STATES; a++)
        for (int b = 0; b < ZERO3_PARAMS_STATES; b++)
            CHECK(zero3_params_move_listed(a, b) == params_by_hand[a][b], "params %s -> %s: the engine's table says %d, zero3.h's drawing %d",
                  PARAMS[a], PARAMS[b], zero3_params_move_listed(a, b), params_by_hand[a][b]);
    for (int a = 0; a < ZERO3_GRADS_STATES; a++)
        for (int b = 0; b < ZERO3_GRADS_STATES; b++)
            CHECK(zero3_grads_move_listed(a, b) == grads_by_hand[a][b], "grads %s -> %s: the engine's table says %d, zero3.h's drawing %d",
                  GRADS[a], GRADS[b], zero3_grads_move_listed(a, b), grads_by_hand[a][b]);
    printf("  the engine's tables of moves are zero3.h's drawings: %d params moves, %d gradient moves checked\n",
           ZERO3_PARAMS_STATES * ZERO3_PARAMS_STATES, ZERO3_GRADS_STATES * ZERO3_GRADS_STATES);
}

// In check mode: the big unit's reduce-scatter started (ACCUMULATING -> REDUCING) and, with `plant`,
// its gradients found IDLE when zero3_finish_reductions retires it, as a stray write elsewhere would
// leave them. The retirement's move is then IDLE -> IDLE, which the table does not list.
static void grads_retired(int plant) {
    Zero3 z; Zero3Backend be;
    make(&z, &be, (Case){3, 4, 0, 0, 0, ZERO3_F32});
    z.step.check_steps = 1;
    zero3_step_begin(&z);
    zero3_micro_begin(&z, 0, 1, ZERO3_PASS_TRAIN);
    zero3_grads(&z, BIG);
    zero3_reduce_grads(&z, BIG);
    if (plant) z.units[BIG].grad_state = ZERO3_GRADS_IDLE;
    zero3_finish_reductions(&z);
    zero3_free(&z);
}

// Runs grads_retired(plant) in a child process; returns its stderr in err and 1 when it was stopped
// by zero3_die's abort, 0 when it returned.
static int child_aborts(int plant, char *err, size_t errlen) {
    int fd[2];
    if (pipe(fd) != 0) { perror("pipe"); exit(1); }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        grads_retired(plant);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < errlen && (r = read(fd[0], err + n, errlen - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void check_illegal_grads_move(void) {
    char err[1024];
    const char *want = "unit big: grads IDLE -> IDLE is not a move of the state table";
    int aborted = child_aborts(0, err, sizeof err);
    CHECK(!aborted && err[0] == 0, "a reduction retired as the table says: the engine stopped (%s)", err);
    aborted = child_aborts(1, err, sizeof err);
    CHECK(aborted && strstr(err, want), "an illegal gradient move in check mode: %s, stderr '%s'; want '%s'",
          aborted ? "aborted" : "not stopped", err, want);
    printf("  check mode stops on a gradient move its table does not list: '%s'\n", want);
}

int main(void) {
    // Two units of 100 and 1000 fp32 parameters on 4 ranks (align 1: P = 100, 1000; S = 25, 250).
    // Bytes by hand: full params/grads 1100 x 4 = 4400 each, sharded 275 x 4 = 1100; m and v
    // 2 x 4400 full, 2 x 1100 sharded; fp32 params are the master (no separate copy).
    // Collectives of one step, by hand: DDP all-reduces each unit's grads (2); stage 1 reduce-scatters
    // them (2) and all-gathers the updated params (2); stage 2 the same; stage 3 gathers each unit for
    // the forward and again for the backward (4) and reduce-scatters (2); every wait of those, plus
    // the norm's blocking scalar (not counted here).
    printf("the contract, by hand (4 ranks; units of 100 and 1000 parameters):\n");
    const char *ddp = "full full full RESIDENT";
    check_contract("stage 0", (Case){0, 4, 0, 0, 0, ZERO3_F32}, ddp, ddp, 4400 + 4400 + 8800, 0, 0, 2);
    check_contract("stage 1", (Case){1, 4, 0, 0, 0, ZERO3_F32}, "full full sharded RESIDENT",
                   "full full sharded RESIDENT", 4400 + 4400 + 2200, 2, 2, 0);
    check_contract("stage 2", (Case){2, 4, 0, 0, 0, ZERO3_F32}, "full sharded sharded RESIDENT",
                   "full sharded sharded RESIDENT", 4400 + 1100 + 2200, 2, 2, 0);
    const char *z3 = "sharded sharded sharded SHARDED";
    check_contract("stage 3", (Case){3, 4, 0, 0, 0, ZERO3_F32}, z3, z3, 1100 + 1100 + 2200, 4, 2, 0);
    // persistence threshold 500: the 100-parameter unit takes DDP's row (400 + 400 + 800 bytes, one
    // all-reduce), the other stays at stage 3 (250 x 4 x 4 = 4000 bytes, 2 gathers, 1 reduce-scatter)
    check_contract("stage 3, -pt 500", (Case){3, 4, 0, 500, 0, ZERO3_F32}, ddp, z3, 1600 + 4000, 2, 1, 1);
    // -ra 0: the same placements; no gather in the backward (2 gathers, not 4)
    check_contract("stage 3, -ra 0", (Case){3, 4, 0, 0, 1, ZERO3_F32}, z3, z3, 4400, 2, 2, 0);
    // HSDP, groups of 2 of the 4 ranks: shards of P / 2 (50 + 500 = 550 elements, x 4 parts x 4 bytes)
    check_contract("stage 3, HSDP groups of 2", (Case){3, 4, 2, 0, 0, ZERO3_F32}, z3, z3, 550 * 16, 4, 2, 0);
    check_contract("stage 2, HSDP groups of 2", (Case){2, 4, 2, 0, 0, ZERO3_F32}, "full sharded sharded RESIDENT",
                   "full sharded sharded RESIDENT", 4400 + 550 * 4 * 3, 2, 2, 0);
    // bf16 working params and grads (2 bytes), an fp32 master beside them: stage 3 holds 275 x (2 + 2
    // + 4 + 8) = 4400 bytes; stage 0 holds 1100 x 16 = 17600
    check_contract("stage 3, bf16", (Case){3, 4, 0, 0, 0, ZERO3_BF16}, z3, z3, 275 * 16, 4, 2, 0);
    check_contract("stage 0, bf16", (Case){0, 4, 0, 0, 0, ZERO3_BF16}, ddp, ddp, 1100 * 16, 0, 0, 2);

    check_departure();
    for (int stage = 0; stage <= 3; stage++) check_abandon(stage);
    printf("a unit's state, verb by verb (check mode: every move against the table):\n");
    check_lifecycle(0);
    check_lifecycle(1);
    printf("the tables of moves (params, gradients), by hand:\n");
    check_move_tables();
    check_illegal_grads_move();
    printf("exposed communication against the clock (waits of %.0f ms, compute spans of %.0f ms):\n", WAIT_MS, COMPUTE_MS);
    for (int stage = 0; stage <= 3; stage++) check_exposed_clock(stage);
    if (failures) { fprintf(stderr, "test_engine_contract: %d failures\n", failures); return 1; }
    printf("test_engine_contract: all passed\n");
    return 0;
}
