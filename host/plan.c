// host/plan.c: -plan N. The memory and communication of every ZeRO stage for N ranks and a model,
// without the model: from a descriptor (d12, d48, dLcChHtT) or a model file's header the units are
// laid out exactly as a run would (padding included) and the collective ledger counts them; from
// a bare parameter count (-e 7.5B) the whole model is one unit (bytes exact, counts not given).
// With link bandwidths and a compute rate it also estimates each stage's time per step.
#include "plan.h"
#include "readfile.h"
#include <sys/stat.h>
#include "gpt2.h"

static const char *STAGE_NAMES[4] = {"0 DDP", "1    ", "2    ", "3    "};

static void print_memory(double psi, int N, Zero3DType pt, Zero3DType gt, const char *what) {
    printf("model-state memory per rank, %s\n", what);
    printf("  stage              bytes           GB          GiB\n");
    for (int s = 0; s <= 3; s++) {
        double b = zero3_theory_state_bytes(s, psi, N, pt, gt);
        char digits[64], grouped[96];
        snprintf(digits, sizeof digits, "%.0f", b);
        int len = (int)strlen(digits), j = 0;
        for (int i = 0; i < len; i++) {   // 120000000000 -> 120,000,000,000
            grouped[j++] = digits[i];
            if ((len - 1 - i) % 3 == 0 && i != len - 1) grouped[j++] = ',';
        }
        grouped[j] = '\0';
        printf("  %s  %22s  %11.3f  %11.3f\n", STAGE_NAMES[s], grouped, b / 1e9, b / 1073741824.0);
    }
}

// The seconds a ring over N ranks needs to send `bytes` from each rank at `gbps` GB/s per rank.
static double ring_s(double bytes, double gbps) { return bytes / (gbps * 1e9); }

int plan_main(const TrainArgs *a, const TrainBuild *build) {
    const int N = a->plan_world, r0 = g_proc.rank == 0;
    GPT2Config cfg;
    double psi = 0.0;
    int have_units = 0;
    char err[512] = "";
    if (a->init[0] == 'd' && gpt2_config_from_descriptor(a->init, &cfg) == 0) have_units = 1;
    else {
        char why[128];
        FILE *f = open_regular_file(a->init, why, sizeof why);   // never blocks on a FIFO
        int elem_bytes;
        struct stat st;
        if (!f && stat(a->init, &st) == 0) fatal("flag -e: cannot open model file %s (%s)", a->init, why);
        if (f) {
            if (gpt2_read_header(f, a->init, &cfg, &elem_bytes, err, sizeof err)) { fclose(f); fatal("%s", err); }
            fclose(f);
            have_units = 1;
        } else {
            int rc = parse_param_count(a->init, &psi, err, sizeof err);
            if (rc < 0) fatal("%s", err);
            if (rc == 0) fatal("flag -e: cannot open model file %s (%s); give a descriptor like d12 or a parameter count like 7.5B",
                               a->init, strerror(errno));
        }
    }
    // the run's shape: A micro-steps from -d (tokens per step), else one
    long long per_micro = (long long)N * a->B * a->T;
    long long tokens = a->tokens_per_step ? a->tokens_per_step : per_micro;
    if (tokens % per_micro) fatal("flag -d: %lld tokens per step is not a multiple of N*B*T = %d*%d*%d = %lld", tokens, N, a->B, a->T, per_micro);
    int A = (int)(tokens / per_micro);

    // the exact unit layout for N ranks (nothing allocated: zero3_allocate is not called)
    Zero3 z;
    Zero3Backend fake;
    memset(&fake, 0, sizeof fake);
    fake.rank = 0;
    fake.world = N;
    int *fwd = NULL, *bwd = NULL;
    if (have_units) {
        Zero3Config zc = {3, 1, build->align, ZERO3_F32, ZERO3_F32, 0, 0, 0};
        zero3_init(&z, &fake, &zc);
        gpt2_register_units(&cfg, &z);
        psi = (double)gpt2_num_parameters(&cfg);
        fwd = (int *)xmalloc((size_t)z.nunits * sizeof(int));
        bwd = (int *)xmalloc((size_t)z.nunits * sizeof(int));
        gpt2_gathers_per_pass(&cfg, 0, 0, fwd, bwd);
    }
    if (!r0) goto done;

    printf("plan: %s", a->init);
    if (have_units) printf(" (GPT-2 L=%d C=%d NH=%d V=%d maxT=%d: %.0f parameters in %d units)", cfg.num_layers, cfg.channels,
                           cfg.num_heads, cfg.vocab_size, cfg.max_seq_len, psi, z.nunits);
    else printf(" (%.0f parameters)", psi);
    printf(" on N=%d ranks; nothing allocated\n", N);
    print_memory(psi, N, ZERO3_F32, ZERO3_F32, "fp32 (this CPU trainer: params 4 + grads 4 + Adam m, v 8 = 16 bytes/param)");
    print_memory(psi, N, ZERO3_BF16, ZERO3_BF16,
                 "mixed precision (bf16 params 2 + grads 2, fp32 master + m + v 12 = 16 bytes/param: the notes, the GPU trainer)");
    printf("  (model state only: activations, gathered units and gradient buffers come on top)\n");

    // the collective ledger per stage, both precisions
    Zero3Ledger led[2][4];
    for (int prec = 0; prec < 2; prec++) {
        Zero3DType t = prec ? ZERO3_BF16 : ZERO3_F32;
        for (int s = 0; s <= 3; s++) {
            if (have_units) zero3_theory_ledger(&z, s, A, t, t, fwd, bwd, &led[prec][s]);
            else zero3_theory_ledger_params(s, psi, N, A, t, t, &led[prec][s]);
        }
    }
    printf("communication per step, bytes each rank sends (ring model: all-gather and reduce-scatter move (N-1)/N of\n"
           "the buffer, all-reduce twice that), A=%d micro-step%s per step%s:\n", A, A > 1 ? "s" : "",
           A > 1 ? " (grads SHARDED, stages 2-3, reduce-scatter at every micro-step and stage 3 gathers at every one;"
                   " stages 0-1 reduce once per step)" : "");
    printf("  GB, mixed precision            fwd_gather  bwd_gather  reduce_sc.  all_reduce step_gather       total   x DDP   total fp32\n");
    double ddp = zero3_ledger_bytes(&led[1][0]);
    for (int s = 0; s <= 3; s++) {
        const Zero3Ledger *l = &led[1][s];
        printf("  %s                      ", STAGE_NAMES[s]);
        for (int k = 0; k < ZERO3_COLL_NORM; k++) printf("  %10.3f", l->row[k].bytes / 1e9);
        double total = zero3_ledger_bytes(l);
        printf("  %10.3f  %6.3f  %11.3f\n", total / 1e9, ddp > 0 ? total / ddp : 0.0, zero3_ledger_bytes(&led[0][s]) / 1e9);
        if (have_units) {
            printf("        collectives            ");
            for (int k = 0; k < ZERO3_COLL_NORM; k++) printf("  %10.0f", l->row[k].count);
            printf("   (+1 norm all-reduce)\n");
        }
    }
    if (!have_units) printf("  (a bare parameter count: the model as one unit gathered once per pass; counts depend on the units)\n");

    if (a->link_gbps <= 0.0 || a->tflops <= 0.0) {
        printf("time: give -bw GB/s (per rank, inside a node), -tf TFLOP/s (per rank) [-bwx GB/s across nodes, -rpn ranks per node]"
               " for the time per step\n");
        goto done;
    }
    {
        int rpn = a->ranks_per_node > 0 ? a->ranks_per_node : N;
        double bwx = a->link_x_gbps > 0 ? a->link_x_gbps : a->link_gbps;
        double bw = N > rpn ? bwx : a->link_gbps;   // a ring across nodes runs at its slowest link
        double compute = 6.0 * psi * (double)tokens / N / (a->tflops * 1e12);
        double fc = compute / 3.0, bc = 2.0 * compute / 3.0;   // forward 2 psi, backward 4 psi FLOPs per token
        // one unit's collectives that nothing can hide: the first gather of each forward and the
        // last reduction of each backward (the embedding for GPT-2); unknown for a bare count
        double edge_units = 0.0;
        if (have_units) edge_units = (double)z.units[gpt2_unit_emb(&cfg)].padded * (N - 1.0) / N;
        printf("time per step, mixed precision: %lld tokens per step (%d per rank per micro-step x %d), %.0f FLOPs per token (6 x params)"
               " at %g TFLOP/s per rank; ring links %g GB/s per rank (%s)\n", tokens, a->B * a->T, A, 6.0 * psi, a->tflops, bw,
               N > rpn ? "across nodes: the slowest link of the ring" : "inside one node");
        printf("  stage   comm ms  compute ms  fwd comm/compute  bwd comm/compute  exposed ms  step ms  prefetch and overlap\n");
        for (int s = 0; s <= 3; s++) {
            const Zero3Ledger *l = &led[1][s];
            double fg = ring_s(l->row[ZERO3_COLL_FWD_GATHER].bytes, bw), bg = ring_s(l->row[ZERO3_COLL_BWD_GATHER].bytes, bw);
            double rs = ring_s(l->row[ZERO3_COLL_REDUCE_SCATTER].bytes, bw), ar = ring_s(l->row[ZERO3_COLL_ALL_REDUCE].bytes, bw);
            double sg = ring_s(l->row[ZERO3_COLL_STEP_GATHER].bytes, bw);
            double comm = fg + bg + rs + ar + sg, fcomm = fg, bcomm, window = bc, edge = 0.0;
            if (s == 0 || s == 1) window = bc / A;   // grads FULL: reduced in the last micro-step's backward only
            bcomm = bg + rs + ar;
            if (have_units && N > 1) {
                double unit_red = (s == 0 ? 2.0 : 1.0) * edge_units * 2 / bw / 1e9;
                edge = unit_red * (s >= 2 ? A : 1) + (s == 3 ? A * edge_units * 2 / bw / 1e9 : 0.0);
            }
            double over_f = fcomm > fc ? fcomm - fc : 0.0, over_b = bcomm > window ? bcomm - window : 0.0;
            double exposed = over_f + over_b + sg + edge;   // the post-step gather runs after AdamW: nothing to hide it behind
            const char *verdict = (over_f + over_b == 0.0) ? (sg > 0 ? "hidden, but for the gather after AdamW"
                                                                     : "hidden (but for the first/last unit)")
                                                           : "NOT hidden: communication-bound";
            printf("  %s  %8.1f  %10.1f  %16.2f  %16.2f  %10.1f  %7.1f  %s\n", STAGE_NAMES[s], comm * 1e3, compute * 1e3,
                   fc > 0 ? fcomm / fc : 0.0, window > 0 ? bcomm / window : 0.0, exposed * 1e3, (compute + exposed) * 1e3, verdict);
        }
        printf("  (model: forward = 1/3 and backward = 2/3 of the compute; stage-3 forward gathers hide behind the forward, its\n"
               "   backward gathers and reduce-scatters behind the backward, with prefetch -pd >= 1; all-reduce and stage-1\n"
               "   reduce-scatter behind the last micro-step's backward; stages 1-2 gather the updated params after AdamW, exposed;\n"
               "   the first unit's gather and the last unit's reduction%s have nothing to hide behind; latency ignored)\n",
               have_units ? " (GPT-2: the embedding)" : " (not counted for a bare parameter count)");
    }
done:
    if (have_units) { free(fwd); free(bwd); zero3_free(&z); }
    fflush(stdout);
    return 0;
}
