/*
Reads an activation dump with dump.h and prints what it found, so tests/test_reference.sh can
compare it with an independent Python reading of the same file (tests/reference/checks.py reader-summary).

    gcc -O2 -Wall -Wextra -I. -o /tmp/test_dump_reader tests/unit/test_dump_reader.c -lm
    /tmp/test_dump_reader FILE

On success, exit 0 and stdout:
    header B T L C NH V Vp maxT nsteps num_records warmup seed compute_bits
    hyper lr final_frac weight_decay grad_clip beta1 beta2 eps          (%.9g)
    record NAME dtype ndim d0 d1 d2 d3 numel sum sum_abs first last    (sums in double, %.17g)
    ... one line per record, in file order
On a file dump_open rejects: exit 1, and dump_open's message as the one line on stderr.
It also checks dump_find / dump_get on the records every dump has (exit 2 if they misbehave).
*/
#include <stdio.h>
#include <stdlib.h>
#include "../dump.h"

// the value at index k of a record, as a double, whatever its dtype
static double record_value(const DumpRecord *r, size_t k) {
    return r->dtype == DUMP_FLOAT32 ? (double)r->f[k] : (double)r->i[k];
}

static void print_record(const DumpRecord *r) {
    double sum = 0.0, sum_abs = 0.0;
    for (size_t k = 0; k < r->numel; k++) {
        double x = record_value(r, k);
        sum += x;
        sum_abs += fabs(x);
    }
    double first = r->numel > 0 ? record_value(r, 0) : 0.0;
    double last = r->numel > 0 ? record_value(r, r->numel - 1) : 0.0;
    printf("record %s %d %d %d %d %d %d %zu %.17g %.17g %.17g %.17g\n", r->name, r->dtype, r->ndim,
           r->dims[0], r->dims[1], r->dims[2], r->dims[3], r->numel, sum, sum_abs, first, last);
}

// dump_find must find what exists and only that; dump_get must check shapes
static int check_lookups(const Dump *d) {
    char err[256];
    int logits_dims[3] = {d->B, d->T, d->V};
    int wrong_dims[3] = {d->B, d->T, d->V + 1};
    int wte_dims[2] = {d->Vp, d->C};
    if (dump_find(d, "no such record") != NULL) { fprintf(stderr, "dump_find found a missing record\n"); return 0; }
    if (dump_get(d, "logits", DUMP_FLOAT32, 3, logits_dims, err, sizeof(err)) == NULL) {
        fprintf(stderr, "dump_get(logits): %s\n", err);
        return 0;
    }
    if (dump_get(d, "grad.wte", DUMP_FLOAT32, 2, wte_dims, err, sizeof(err)) == NULL) {
        fprintf(stderr, "dump_get(grad.wte): %s\n", err);
        return 0;
    }
    if (dump_get(d, "logits", DUMP_FLOAT32, 3, wrong_dims, err, sizeof(err)) != NULL ||
        dump_get(d, "logits", DUMP_INT32, 3, logits_dims, err, sizeof(err)) != NULL) {
        fprintf(stderr, "dump_get accepted a wrong shape or dtype\n");
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DUMP_FILE\n", argv[0]);
        return 1;
    }
    Dump d;
    char err[512];
    if (dump_open(&d, argv[1], err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("header %d %d %d %d %d %d %d %d %d %d %d %d %d\n", d.B, d.T, d.L, d.C, d.NH, d.V, d.Vp,
           d.maxT, d.nsteps, d.num_records, d.warmup, d.seed, d.compute_bits);
    printf("hyper %.9g %.9g %.9g %.9g %.9g %.9g %.9g\n", d.lr, d.final_frac, d.weight_decay,
           d.grad_clip, d.beta1, d.beta2, d.eps);
    for (int k = 0; k < d.num_records; k++) { print_record(&d.records[k]); }
    int lookups_ok = check_lookups(&d);
    dump_free(&d);
    dump_free(&d); // freeing twice must be harmless
    return lookups_ok ? 0 : 2;
}
