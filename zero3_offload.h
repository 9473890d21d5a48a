// zero3_offload.h: where a rank's shards live (ZeRO-Offload's and ZeRO-Infinity's ideas).
//
// The stage table (zero3.h) says how much of the state a rank keeps: the whole, or its 1/N slice.
// A placement says where that part sits. Offload is a placement, not a stage: the same slice, the
// same AdamW, the same numbers; only the memory that holds them between steps changes.
//
//   state (this rank's)          | MEMORY (default)        | DISK
//   -----------------------------+-------------------------+------------------------------------------
//   fp32 master (bf16 runs)      | zero3.c's resident      | -oo disk[:DIR]: DIR/optimizer_r<rank>.bin,
//   AdamW m, v                   |   buffers, for the run  |   one record per unit, streamed through S
//                                |                         |   unit-sized slots (-os S, default 3)
//   params shard (stage 3: the   | params_shard, for the   | -op disk[:DIR]: DIR/params_r<rank>.bin, one
//     units whose params are     |   run                   |   record per unit, read into a slot just
//     SHARDED; persistent units  |                         |   before each gather (forward, backward)
//     stay in memory)            |                         |   and streamed in the optimizer step
//   fp32 master (fp32 runs: it   | the working params      | goes with the params (they are the master:
//     is the params shard)       |                         |   the same record, read and written by AdamW)
//   gradients                    | as the stage says       | as the stage says
//
// HOST (-oo host) is ZeRO-Offload's placement on a device (the GPU trainer): the optimizer state sits
// in the resident buffers, allocated in the backend's pinned host memory; the step's gradients go
// to the host, AdamW runs there (cpu/adamw.c, the CPU trainer's), the params come back. Where the
// backend's memory is the host's (the CPU trainer) it is MEMORY itself (zero3_optimizer_medium).
// Its buffers are the resident ones, so nothing below concerns it: the rest of this file is DISK.
//
// Both files are one kind of store (Zero3Store): a record per unit, the same slots, I/O thread and
// checksums; they differ only in what a record holds. An optimizer record holds the unit's optimizer
// span (zero3_optimizer_range), array after array (master when it is separate, m, v); a params record
// the unit's params shard (param_type). Each is padded to a 4096-byte block so that every record
// starts and ends on one:
// the reads and writes are direct (O_DIRECT, past the page cache) from 4096-aligned slots. The file
// is reserved whole at start (posix_fallocate): a disk without the room is refused before the first
// step, and a disk that fills later cannot take the run's room.
//
// The optimizer step streams the units through S slots (slot = unit mod S) on one I/O thread, each
// store its own (with -oo disk -op disk, both side by side: unit k's m, v and its params shard). The
// I/O thread runs its queue in order, so a read queued behind a slot's write-back finds it done, and
// the main thread waits only where it needs a slot's bytes:
//
//   step begin:    queue the reads of units 0 .. S-2 (the optimizer's: read_ahead), each behind
//                  its slot's last write-back: they run under the forward and backward
//   stream_begin:  queue what the cache changed, and the first reads not queued yet
//   for each unit k:
//     take(k):     wait for k's read (its checksum checked on the I/O thread)
//     AdamW on k   (zero3.c: the unit's segments, pointing into the slot)
//     give(k):     queue k's write-back, then k+S-1's read into k-1's slot (behind k-1's write-back)
//   (no wait at the end: the last write-backs run on under the next step's forward)
//
// So while unit k is updated, units before it are written and units after it read: the disk and
// AdamW overlap within the step, and with S above 3 the disk also works through the forward and
// backward (the last S write-backs, then the next S-1 reads), which the step otherwise leaves it
// idle in. The step takes about max(compute + AdamW, bytes / disk bandwidth) once the slots hold
// what the disk moves in the compute's time; every record is still read and written once a step.
// The bf16 params' stream zeroes its slots instead of reading them: AdamW writes every param of the
// span from the fp32 master, so only the write-back moves bytes.
//
// The params between steps (-op disk): a gather (zero3.c's gather_source, for the forward and the
// backward, prefetched or not) reads the unit's record into its slot (zero3_offload_read, always a
// read of the file, its checksum checked) and copies the shard into its own place in the gathered
// buffer; the all-gather then runs in place. The slot is free again as soon as the copy is done: no
// shard is held, and the read happens where the gather is issued, so a prefetched gather reads ahead.
//
// Outside the step (the init filling the master, a checkpoint reading or loading the state, export)
// the same slots act as a cache of S units: zero3_offload_array(u, a) brings unit u in (writing
// back the slot's last unit if it changed) and hands out its array. A caller uses one unit at a time,
// as those loops do. A unit never written yet (a fresh run's m and v) reads as zeros.
//
// Faults: every record's checksum is kept in memory when it is written and checked when it is read
// back; the file's size is checked at every step's start. A short read, a changed record, a failed
// write end the run through cfg's fail hook with one line naming the file; the failing rank first
// removes both stores' files of every rank in their folders (the hook kills the other ranks where
// they stand, before they could remove their own). The state files are scratch: checkpoints hold
// the state (read through the cache; with -op disk the params through the master), so a run killed
// mid-write resumes from its last checkpoint, and the files are rewritten from it.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Zero3 Zero3;
typedef struct Zero3Offload Zero3Offload;

// Where one kind of state lives between its uses (Zero3Config.optimizer_medium).
typedef enum {
    ZERO3_IN_MEMORY = 0,   // the engine's resident buffers (the backend's memory)
    ZERO3_IN_HOST = 1,     // the backend's host memory (host_alloc); on the CPU trainer IN_MEMORY itself
    ZERO3_ON_DISK = 2,     // a per-rank file, streamed unit by unit (above)
} Zero3Medium;

// What a store holds (its file: dir/optimizer_r<rank>.bin, dir/params_r<rank>.bin).
typedef enum { ZERO3_STORE_OPTIMIZER = 0, ZERO3_STORE_PARAMS = 1 } Zero3Store;

// The arrays of an optimizer record, in file order (master only where it is separate from the
// params); a params record has one, array 0.
enum { ZERO3_OFFLOAD_MASTER = 0, ZERO3_OFFLOAD_M = 1, ZERO3_OFFLOAD_V = 2 };

// After zero3_allocate: creates the store's file in dir and reserves it whole. NULL with a message
// in err (nothing left on disk) when the folder or the disk will not take it.
Zero3Offload *zero3_offload_open(Zero3 *z, Zero3Store what, const char *dir, char *err, size_t errlen);
void zero3_offload_close(Zero3Offload *o);   // stops the I/O thread, removes the file
const char *zero3_offload_path(const Zero3Offload *o);
double zero3_offload_file_bytes(const Zero3Offload *o);   // the file's reserved size
int zero3_offload_slots(const Zero3Offload *o);            // its staging slots in memory
double zero3_offload_slots_bytes(const Zero3Offload *o);   // their bytes together

// The cache: unit u's array (ZERO3_OFFLOAD_M...; 0 for the params) over its span, in a slot, marked
// changed (float for the optimizer's, param_type for the params').
void *zero3_offload_array(Zero3Offload *o, int u, int array);
void zero3_offload_flush(Zero3Offload *o);   // every changed slot written back
// The read before a gather: unit u's record from the file into its slot, unchanged (above).
const void *zero3_offload_read(Zero3Offload *o, int u);

// The optimizer step's stream (the pseudocode above).
void zero3_offload_read_ahead(Zero3Offload *o);   // at the step's start (zero3_step_begin)
void zero3_offload_stream_begin(Zero3Offload *o);
void zero3_offload_take(Zero3Offload *o, int u);
void zero3_offload_give(Zero3Offload *o, int u);
// Waits for every request queued (the last step's write-backs): before the I/O is counted.
void zero3_offload_drain(Zero3Offload *o);

// What the offload moved and the I/O thread's seconds inside pread/pwrite, over the run.
typedef struct { double bytes_read, bytes_written, io_seconds; int direct; } Zero3OffloadStats;
Zero3OffloadStats zero3_offload_stats(const Zero3Offload *o);

#ifdef __cplusplus
}
#endif
