// emu_streams.h: streams, events and the order in which queued GPU work runs, for the CPU emulator
// (tools/emu/README.md). Included by cuda_runtime.h; defines EmuStream, EmuEvent and, in
// namespace emu, the queues (enqueue, add_wait) and the drains (run_until, run_all, run_any_ready).
//
// On a GPU, work issued to a stream runs later, at a time the host does not control, and work on
// two streams overlaps in any order unless an event orders it. The emulator makes that visible:
//   - every kernel launch, async copy or memset, event record, cuBLAS call and NCCL collective is
//     *queued* on its stream and nothing runs when it is issued;
//   - queued work runs only when the host forces it (a stream/event/device synchronize, a blocking
//     copy, cudaFree, ...), and then the streams are interleaved adversarially: per drain a policy is
//     drawn (seeded by EMU_SCHED_SEED) among running the needed work as late as possible, running
//     what the target waits on as early as possible, and running any ready stream at random;
//   - what CUDA guarantees still holds: one stream runs in issue order, a cudaStreamWaitEvent holds
//     its stream until exactly the work recorded before the event has run, and the legacy default
//     stream waits for (and is waited for by) every blocking stream.
// So a missing event between two streams lets the consumer run before the producer (or the producer
// overwrite a buffer before the consumer read it) and the result goes wrong, instead of the race
// passing by luck as it did when every call ran at once. EMU_STREAMS=inorder restores that old
// behaviour (each call runs when issued), to tell a stream-order bug from any other.
#pragma once
#include <pthread.h>
#include <deque>
#include <functional>
#include <vector>

namespace emu {
struct Work;
}

// A stream: a queue of work. A position in it is a ticket: the n-th item queued has ticket n, and
// `completed` counts the items that have run, so "ticket t has run" is completed >= t.
struct EmuStream {
    int id;
    bool legacy;    // the legacy default stream (0 / nullptr)
    bool blocking;  // synchronizes with the legacy stream (created without cudaStreamNonBlocking)
    bool alive;
    std::deque<emu::Work>* queue;
    uint64_t enqueued, completed;
};

// An event is the position of its latest record: it has fired once that stream ran past the ticket.
// A wait copies the position, so re-recording the event later does not change an earlier wait.
struct EmuEvent {
    EmuStream* stream;  // nullptr: never recorded (waiting on it is a no-op, as in CUDA)
    uint64_t ticket;
    double time;        // when the latest record ran (cudaEventElapsedTime)
    bool alive;
};

namespace emu {

// One queued item: a piece of work to run, or a wait until stream `on` has completed `ticket` items.
struct Work {
    std::function<void()> run;  // empty for a wait
    EmuStream* on;
    uint64_t ticket;
};

inline double now() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The stream scheduler's own random numbers (the block scheduler has its own): seeded by
// EMU_SCHED_SEED, so a failing interleaving can be replayed.
inline uint64_t stream_random() {
    static uint64_t state = 0;
    if (state == 0) {
        const char* seed = getenv("EMU_SCHED_SEED");
        state = 0xD1B54A32D192ED03ull * (uint64_t)(seed ? atoll(seed) + 3 : 5);
    }
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

// EMU_STREAMS=inorder: every call runs when it is issued (the emulator's old, forgiving behaviour)
inline bool streams_inorder() {
    static int v = -1;
    if (v < 0) {
        const char* s = getenv("EMU_STREAMS");
        v = s && strcmp(s, "inorder") == 0;
    }
    return v == 1;
}

inline std::vector<EmuStream*>& all_streams() {
    static std::vector<EmuStream*> v;
    return v;
}

// The host thread: the one that made the first stream. Only it runs queued work (the emulated
// GPU's progress is its drains); another thread (a watchdog) may only look: completed_seen reads
// a stream's count of items run, which the host thread publishes with a release store (run_head).
inline pthread_t host_thread() {
    static pthread_t t = pthread_self();
    return t;
}
inline bool on_host_thread() { return pthread_equal(pthread_self(), host_thread()) != 0; }
inline bool has_run_seen(const EmuStream* s, uint64_t ticket) {
    return __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) >= ticket;
}

inline EmuStream* new_stream(bool legacy, bool blocking) {
    host_thread();   // the first stream's thread is the host's
    EmuStream* s = new EmuStream{(int)all_streams().size(), legacy, blocking, true, new std::deque<Work>, 0, 0};
    all_streams().push_back(s);
    return s;
}

// The legacy default stream (what 0 / nullptr means) and the per-thread default stream (one host
// thread here), created on first use.
inline EmuStream* legacy_stream() {
    static EmuStream* s = new_stream(true, true);
    return s;
}
inline EmuStream* per_thread_stream() {
    static EmuStream* s = new_stream(false, true);
    return s;
}
inline EmuStream* resolve(EmuStream* s) {
    if (s == nullptr || s == (EmuStream*)0x1) return legacy_stream();  // 0, cudaStreamLegacy
    if (s == (EmuStream*)0x2) return per_thread_stream();              // cudaStreamPerThread
    if (!s->alive) die("work queued on a destroyed stream");
    return s;
}

inline bool has_run(const EmuStream* s, uint64_t ticket) { return s->completed >= ticket; }


inline bool pending(const EmuStream* s) { return s->completed < s->enqueued; }

// The head of s can run now: it is work, or a wait that is satisfied.
inline bool ready(const EmuStream* s) {
    if (s->queue->empty()) return false;
    const Work& w = s->queue->front();
    return w.run || has_run(w.on, w.ticket);
}

// Runs the item at the head of s (work, or a satisfied wait) and counts it done.
inline void run_head(EmuStream* s) {
    Work w = std::move(s->queue->front());
    s->queue->pop_front();
    if (w.run) w.run();
    __atomic_store_n(&s->completed, s->completed + 1, __ATOMIC_RELEASE);   // seen by other threads (has_run_seen)
}

inline uint64_t push(EmuStream* s, Work w) {
    s->queue->push_back(std::move(w));
    return ++s->enqueued;
}

// Makes s wait until `on` has completed `ticket` items (nothing to queue if it already has).
inline void add_wait(EmuStream* s, EmuStream* on, uint64_t ticket) {
    if (on != s && !has_run(on, ticket)) push(s, Work{nullptr, on, ticket});
}

// ------------------------------------------------------------------------------------------------
// Drains: run queued work until a goal holds, in an adversarial but legal order.

enum Policy { LATE, EARLY, RANDOM, MIXED };

// The stream whose head must run before x can move: x itself, or what its head waits on, chased.
// Cannot loop: a wait only ever names work queued before it.
inline EmuStream* blocker(EmuStream* x) {
    while (!ready(x)) {
        if (x->queue->empty()) die("stream scheduler: waiting on a stream with nothing queued");
        x = x->queue->front().on;
    }
    return x;
}

// As early as possible: the first unsatisfied wait among x's items up to `limit`, chased into the
// stream it waits on, so that producers run before the consumer's own earlier work.
inline EmuStream* earliest(EmuStream* x, uint64_t limit) {
    const uint64_t n = limit - x->completed;
    for (uint64_t i = 0; i < n && i < x->queue->size(); i++) {
        const Work& w = (*x->queue)[i];
        if (!w.run && !has_run(w.on, w.ticket)) return earliest(w.on, w.ticket);
    }
    return blocker(x);
}

inline EmuStream* any_ready() {
    std::vector<EmuStream*> r;
    for (EmuStream* s : all_streams())
        if (ready(s)) r.push_back(s);
    if (r.empty()) return nullptr;
    return r[stream_random() % r.size()];
}

inline EmuStream* pick(EmuStream* goal, uint64_t ticket, Policy p) {
    if (p == MIXED) p = (Policy)(stream_random() % 3);
    if (p == RANDOM) {
        EmuStream* r = any_ready();
        if (r) return r;
    }
    if (p == EARLY) return earliest(goal, ticket);
    return blocker(goal);
}

// Runs work until stream s has completed `ticket` items (and everything that needs).
inline void run_until(EmuStream* s, uint64_t ticket) {
    const Policy p = (Policy)(stream_random() % 4);
    while (!has_run(s, ticket)) run_head(pick(s, ticket, p));
}

// Runs everything queued on every stream (cudaDeviceSynchronize), the streams in a random order.
inline void run_all() {
    for (;;) {
        std::vector<EmuStream*> busy;
        for (EmuStream* s : all_streams())
            if (pending(s)) busy.push_back(s);
        if (busy.empty()) return;
        EmuStream* s = busy[stream_random() % busy.size()];
        run_until(s, s->enqueued);
    }
}

// One step of progress anywhere (the GPU moves on while the host polls, e.g. cudaEventQuery).
inline void run_any_ready() {
    EmuStream* r = any_ready();
    if (r) run_head(r);
}

// Queues work on stream s and returns its ticket. The legacy default stream's implicit
// synchronization becomes explicit waits: legacy work waits for all work queued so far on blocking
// streams, and blocking-stream work waits for all legacy work queued so far.
inline uint64_t enqueue(EmuStream* stream, std::function<void()> fn) {
    EmuStream* s = resolve(stream);
    if (s->legacy) {
        for (EmuStream* b : all_streams())
            if (b != s && b->alive && b->blocking) add_wait(s, b, b->enqueued);
    } else if (s->blocking) {
        EmuStream* l = legacy_stream();
        add_wait(s, l, l->enqueued);
    }
    const uint64_t t = push(s, Work{std::move(fn), nullptr, 0});
    if (streams_inorder()) run_until(s, t);
    return t;
}

// Queues work and waits for it (a call that is synchronous with respect to the host).
inline void enqueue_and_wait(EmuStream* stream, std::function<void()> fn) {
    const uint64_t t = enqueue(stream, std::move(fn));
    run_until(resolve(stream), t);
}

}  // namespace emu
