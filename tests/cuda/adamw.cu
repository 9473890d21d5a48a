// Check of AdamW (gpu/shard_math.cuh): fp32 master weights and moments, gradient in floatX (and in
// fp32, the accumulated-gradient case), working params rewritten in floatX.
//   adamw_single  the one-tensor kernel on an odd length, against the double reference;
//   adamw_multi   the one-launch kernel over a table of segments (what the trainer runs): odd
//                 lengths around the chunk and group sizes, aligned and misaligned offsets (some with
//                 the gradient misaligned against the master), decay on some and off on others.
//                 Every element against the double reference, bitwise against adamw_single run
//                 segment by segment, and the elements between segments untouched. Also with the
//                 params being the master (fp32 working params): nothing but master, m, v written.
// Build: make -C tests/cuda bin/adamw_bf16 (or _fp32); run: tests/cuda/bin/adamw_bf16
#include "common.h"
#include "../../gpu/shard_math.cuh"

// The one-tensor form of the update, one element per thread, over shard_math.cuh's adamw_element:
// the plain kernel the trainer's multi-tensor one is held to, bit for bit. params: the floatX
// working copy, or NULL to skip (the fp32 master is the params).
template <typename Tgrad>
__global__ void adamw_kernel(float* master, floatX* params, const Tgrad* grads, float* m, float* v, size_t n,
                             AdamwHyper h, float weight_decay) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float p = master[i], mi = m[i], vi = v[i];
        adamw_element(p, mi, vi, to_float(grads[i]), h, weight_decay);
        m[i] = mi;
        v[i] = vi;
        master[i] = p;
        if (params != NULL) params[i] = from_float<floatX>(p);
    }
}

template <typename Tgrad>
static void adamw_update(float* master, floatX* params, const Tgrad* grads, float* m, float* v, size_t n,
                         const AdamwHyper& h, float weight_decay, cudaStream_t stream) {
    if (n == 0) return;
    const int block = 512;
    const size_t blocks = CEIL_DIV(n, (size_t)block);
    const unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536);
    adamw_kernel<Tgrad><<<grid, block, 0, stream>>>(master, params, grads, m, v, n, h, weight_decay);
    cudaCheckLaunch();
}

static const float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, grad_scale = 0.7f;
static const int step_t = 5;

// the contract's formula in double (decoupled decay on the old p), element i of every array
struct Reference {
    std::vector<double> p, m, v;
};
static void reference_update(Reference& r, size_t i, double p0, double m0, double v0, double grad, double wd) {
    const double bc1 = 1.0 - pow((double)beta1, step_t), bc2 = 1.0 - pow((double)beta2, step_t);
    const double g = (double)grad_scale * grad;
    r.m[i] = (double)beta1 * m0 + (1.0 - (double)beta1) * g;
    r.v[i] = (double)beta2 * v0 + (1.0 - (double)beta2) * g * g;
    const double upd = (r.m[i] / bc1) / (sqrt(r.v[i] / bc2) + eps);
    r.p[i] = p0 - (double)lr * (upd + wd * p0);
}

// master/m/v: fp32 arithmetic on exact inputs, a handful of roundings: 1e-6 relative is loose, and
// the update is ~lr = 3e-4 per element, so an error in it shows up far above 1e-6 of p.
// params: master rounded to floatX (bf16: 2^-8 relative).
static bool compare_state(const char* name, const std::vector<float>& master, const std::vector<float>& m,
                          const std::vector<float>& v, const std::vector<float>* params, const Reference& r,
                          double* maxerr) {
    char what[64];
    double e1, e2, e3, e4 = 0.0;
    snprintf(what, sizeof what, "%s.master", name);
    bool ok = compare(what, master, r.p, 1e-7, 1e-6, &e1);
    snprintf(what, sizeof what, "%s.m", name);
    ok = compare(what, m, r.m, 1e-8, 1e-6, &e2) && ok;
    snprintf(what, sizeof what, "%s.v", name);
    ok = compare(what, v, r.v, 1e-14, 1e-6, &e3) && ok;
    if (params != NULL) {
        snprintf(what, sizeof what, "%s.params", name);
        ok = compare(what, *params, r.p, 1e-7, TOL(1e-6, 5e-3), &e4) && ok;
    }
    *maxerr = fmax(fmax(e1, e2), fmax(e3, e4));
    return ok;
}

static bool same_bits(const char* what, const void* a, const void* b, size_t bytes) {
    if (memcmp(a, b, bytes) == 0) return true;
    fprintf(stderr, "  %s: the multi-tensor and the single-tensor kernels differ in bits\n", what);
    return false;
}

static void check_single(bool grad_in_fp32) {
    const size_t n = SIZE(16777259, 100003);  // not a multiple of anything: a shard of arbitrary length
    const float wd = 0.1f;
    Rng rng(77);
    std::vector<float> master = random_float(n, -1.0f, 1.0f, rng);
    std::vector<float> grad = random_floatX(n, -0.01f, 0.01f, rng);
    std::vector<float> m0 = random_float(n, -0.01f, 0.01f, rng);
    std::vector<float> v0 = random_float(n, 1e-6f, 1e-4f, rng);
    Reference r{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
    for (size_t i = 0; i < n; i++) reference_update(r, i, master[i], m0[i], v0[i], grad[i], wd);

    float *d_master = to_device_float(master), *d_m = to_device_float(m0), *d_v = to_device_float(v0);
    floatX* d_gx = to_device_floatX(grad);
    float* d_gf = to_device_float(grad);
    floatX* d_params = device_alloc<floatX>(n);
    poison(d_params, n);
    const AdamwHyper h = adamw_hyper(lr, beta1, beta2, step_t, eps, grad_scale);
    auto run = [&] {
        if (grad_in_fp32) adamw_update<float>(d_master, d_params, d_gf, d_m, d_v, n, h, wd, 0);
        else adamw_update<floatX>(d_master, d_params, d_gx, d_m, d_v, n, h, wd, 0);
    };
    run();
    double maxerr;
    std::vector<float> params = from_device_floatX(d_params, n);
    bool ok = compare_state("adamw_single", from_device_float(d_master, n), from_device_float(d_m, n),
                            from_device_float(d_v, n), &params, r, &maxerr);
    float ms = time_ms(run);
    // read g, p, m, v; write p, m, v, params; ~14 flops per element (moments, bias correction,
    // sqrt, divide, decay)
    const double bytes = n * (double)(grad_in_fp32 ? 4 : sizeof(floatX)) + n * 24.0 + n * (double)sizeof(floatX);
    report(grad_in_fp32 ? "adamw_single_grad_fp32" : "adamw_single_grad_floatX", ok, maxerr, ms, bytes, 14.0 * n);
    cudaCheck(cudaFree(d_master));
    cudaCheck(cudaFree(d_m));
    cudaCheck(cudaFree(d_v));
    cudaCheck(cudaFree(d_gx));
    cudaCheck(cudaFree(d_gf));
    cudaCheck(cudaFree(d_params));
}

// A table of segments over shared buffers, as the engine lays a step out: segment s covers elements
// [offset[s], offset[s] + n) of master, m, v, params and [grad_offset[s], ...) of the gradient.
struct SegmentLayout {
    std::vector<size_t> n, offset, grad_offset;
    std::vector<float> decay;
    size_t length;  // of master, m, v, params; the gradient has one more element
};
static SegmentLayout make_layout() {
    // lengths around the group (8), the chunk (ADAMW_CHUNK) and a GPT-2 row (768), and two large ones
    const size_t lengths[] = {1, 3, 8, 9, 63, 64, 65, 767, 768, 2305, ADAMW_CHUNK - 1, ADAMW_CHUNK, ADAMW_CHUNK + 1,
                              SIZE((size_t)2359297, 30001), SIZE((size_t)7077891, 20011)};
    // misalignment in elements of each segment's start (0: 64-element aligned as in the trainer),
    // and of its gradient against the master (a relative phase no head could fix)
    const size_t phase[] = {0, 1, 0, 3, 0, 5, 0, 2, 0, 7, 0, 1, 0, 0, 3};
    const size_t grad_shift[] = {0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0};
    SegmentLayout L;
    size_t cursor = 0;
    for (size_t s = 0; s < sizeof(lengths) / sizeof(lengths[0]); s++) {
        cursor = (cursor + 1 + 63) / 64 * 64 + phase[s];  // at least one untouched element between segments
        L.n.push_back(lengths[s]);
        L.offset.push_back(cursor);
        L.grad_offset.push_back(cursor + grad_shift[s]);
        L.decay.push_back(s % 3 == 1 ? 0.0f : 0.1f);  // decay as data: on for some, off for others
        cursor += lengths[s];
    }
    L.length = cursor + 1;
    return L;
}

static void check_multi(bool grad_in_fp32, bool params_are_master) {
    const SegmentLayout L = make_layout();
    const size_t len = L.length, nsegs = L.n.size();
    Rng rng(91);
    std::vector<float> master = random_float(len, -1.0f, 1.0f, rng);
    std::vector<float> grad = random_floatX(len + 1, -0.01f, 0.01f, rng);
    std::vector<float> m0 = random_float(len, -0.01f, 0.01f, rng);
    std::vector<float> v0 = random_float(len, 1e-6f, 1e-4f, rng);
    // outside the segments the reference is the initial state (nothing may touch it)
    Reference r{std::vector<double>(master.begin(), master.end()), std::vector<double>(m0.begin(), m0.end()),
                std::vector<double>(v0.begin(), v0.end())};
    size_t total = 0;
    for (size_t s = 0; s < nsegs; s++) {
        for (size_t j = 0; j < L.n[s]; j++) {
            const size_t i = L.offset[s] + j;
            reference_update(r, i, master[i], m0[i], v0[i], grad[L.grad_offset[s] + j], L.decay[s]);
        }
        total += L.n[s];
    }

    // two copies of the state: the multi-tensor launch runs on one, the single-tensor kernel on the other
    float* d_master[2];
    float* d_m[2];
    float* d_v[2];
    floatX* d_params[2];
    for (int c = 0; c < 2; c++) {
        d_master[c] = to_device_float(master);
        d_m[c] = to_device_float(m0);
        d_v[c] = to_device_float(v0);
        d_params[c] = device_alloc<floatX>(len);
        poison(d_params[c], len);
    }
    floatX* d_gx = to_device_floatX(grad);
    float* d_gf = to_device_float(grad);
    const size_t grad_bytes = grad_in_fp32 ? sizeof(float) : sizeof(floatX);
    const char* d_grad = grad_in_fp32 ? (const char*)d_gf : (const char*)d_gx;

    std::vector<Zero3AdamSegment> segs(nsegs);
    for (size_t s = 0; s < nsegs; s++) {
        const size_t o = L.offset[s];
        segs[s].master = d_master[0] + o;
        segs[s].m = d_m[0] + o;
        segs[s].v = d_v[0] + o;
        segs[s].grad = d_grad + L.grad_offset[s] * grad_bytes;
        segs[s].params = params_are_master ? (void*)(d_master[0] + o) : (void*)(d_params[0] + o);
        segs[s].n = L.n[s];
        segs[s].weight_decay = L.decay[s];
    }
    // the table as the backend lays it out on the device: [segments][chunks]
    const size_t nchunks = adamw_chunk_table(segs.data(), (int)nsegs, NULL);
    std::vector<AdamwChunk> chunks(nchunks);
    adamw_chunk_table(segs.data(), (int)nsegs, chunks.data());
    Zero3AdamSegment* d_segs = device_alloc<Zero3AdamSegment>(nsegs);
    AdamwChunk* d_chunks = device_alloc<AdamwChunk>(nchunks);
    cudaCheck(cudaMemcpy(d_segs, segs.data(), nsegs * sizeof(Zero3AdamSegment), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d_chunks, chunks.data(), nchunks * sizeof(AdamwChunk), cudaMemcpyHostToDevice));

    const AdamwHyper h = adamw_hyper(lr, beta1, beta2, step_t, eps, grad_scale);
    auto run_multi = [&] {
        if (grad_in_fp32) adamw_multi_update<float>(d_segs, d_chunks, nchunks, h, 0);
        else adamw_multi_update<floatX>(d_segs, d_chunks, nchunks, h, 0);
    };
    run_multi();
    for (size_t s = 0; s < nsegs; s++) {  // the single-tensor kernel, segment by segment, on copy 1
        const size_t o = L.offset[s];
        floatX* params = params_are_master ? NULL : d_params[1] + o;
        if (grad_in_fp32)
            adamw_update<float>(d_master[1] + o, params, d_gf + L.grad_offset[s], d_m[1] + o, d_v[1] + o, L.n[s], h,
                                L.decay[s], 0);
        else
            adamw_update<floatX>(d_master[1] + o, params, d_gx + L.grad_offset[s], d_m[1] + o, d_v[1] + o, L.n[s], h,
                                 L.decay[s], 0);
    }

    // every element of the buffers: updated inside the segments, untouched between them (params:
    // NaN poison between them, so compare only inside; with params == master, never written)
    std::vector<float> got_master = from_device_float(d_master[0], len), got_m = from_device_float(d_m[0], len),
                       got_v = from_device_float(d_v[0], len), got_params = from_device_floatX(d_params[0], len);
    std::vector<float> seg_params;
    std::vector<double> seg_ref_params;
    for (size_t s = 0; s < nsegs; s++)
        for (size_t j = 0; j < L.n[s]; j++) {
            seg_params.push_back(got_params[L.offset[s] + j]);
            seg_ref_params.push_back(r.p[L.offset[s] + j]);
        }
    const char* name = params_are_master ? "adamw_multi_params_are_master"
                       : grad_in_fp32    ? "adamw_multi_grad_fp32"
                                         : "adamw_multi_grad_floatX";
    double maxerr, e_params = 0.0;
    bool ok = compare_state(name, got_master, got_m, got_v, NULL, r, &maxerr);
    if (!params_are_master) {
        ok = compare("adamw_multi.params", seg_params, seg_ref_params, 1e-7, TOL(1e-6, 5e-3), &e_params) && ok;
    } else {
        std::vector<unsigned char> poison_bytes(len * sizeof(floatX), 0xFF), got(len * sizeof(floatX));
        cudaCheck(cudaMemcpy(got.data(), d_params[0], got.size(), cudaMemcpyDeviceToHost));
        if (got != poison_bytes) {
            fprintf(stderr, "  %s: wrote a separate params buffer although params are the master\n", name);
            ok = false;
        }
    }
    ok = same_bits("adamw_multi.master", got_master.data(), from_device_float(d_master[1], len).data(), len * 4) && ok;
    ok = same_bits("adamw_multi.m", got_m.data(), from_device_float(d_m[1], len).data(), len * 4) && ok;
    ok = same_bits("adamw_multi.v", got_v.data(), from_device_float(d_v[1], len).data(), len * 4) && ok;
    ok = same_bits("adamw_multi.params", got_params.data(), from_device_floatX(d_params[1], len).data(), len * 4) && ok;

    float ms = time_ms(run_multi);
    const double bytes = total * (double)grad_bytes + total * 24.0 + (params_are_master ? 0.0 : total * (double)sizeof(floatX));
    printf("  %s: %zu segments, %zu chunks of up to %d elements, %zu elements\n", name, nsegs, nchunks, ADAMW_CHUNK, total);
    report(name, ok, fmax(maxerr, e_params), ms, bytes, 14.0 * total);
    for (int c = 0; c < 2; c++) {
        cudaCheck(cudaFree(d_master[c]));
        cudaCheck(cudaFree(d_m[c]));
        cudaCheck(cudaFree(d_v[c]));
        cudaCheck(cudaFree(d_params[c]));
    }
    cudaCheck(cudaFree(d_gx));
    cudaCheck(cudaFree(d_gf));
    cudaCheck(cudaFree(d_segs));
    cudaCheck(cudaFree(d_chunks));
}

int main() {
    print_device();
    check_single(false);
    check_single(true);
    check_multi(false, false);
    check_multi(true, false);
    check_multi(true, true);
    return finish();
}
