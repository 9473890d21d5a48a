# Build for the ZeRO-3 GPT-2 trainer. Switches:
#   PRECISION=BF16|FP32     GPU precision (CPU trainer is always FP32)          default BF16
#   DDP=1                   build the same binaries fixed at ZeRO stage 0 (plain all-reduce)
#   USE_MPI=0|1             0: no MPI (one rank on CPU; scripts/launch.sh on GPU) default 1
#   GPU_COMPUTE_CAPABILITY  nvcc -arch=sm_XX                                      default 90
#   ARCH=native|x86-64-v3|...  the CPU trainer's -march: native tunes for this machine's CPU, so a
#                           binary on a shared file system may die (illegal instruction) on a node of
#                           another CPU type; a named level (x86-64-v3: AVX2, every x86 server since
#                           2015) runs on every node that has it                   default native
PRECISION ?= BF16
DDP ?= 0
USE_MPI ?= 1
GPU_COMPUTE_CAPABILITY ?= 90
# Python with torch: the first of python3 / /usr/bin/python3 that imports torch (Debian's torch
# lives under /usr/bin/python3; a GPU machine's PyTorch is on PATH). Looked for once, and only by a
# recipe that runs Python: importing torch costs a second or more, which every other make call skips.
PYTHON_WITH_TORCH = $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; break; }; done)
PYTHON ?= $(eval PYTHON := $(or $(PYTHON_WITH_TORCH),/usr/bin/python3))$(PYTHON)

# ---------------------------------------------------------------- CPU
ARCH ?= native
CFLAGS ?= -O3 -march=$(ARCH) -Wall -Wextra -Wno-unused-parameter -Wno-unused-function
CFLAGS += -fopenmp -std=gnu11
LDLIBS_CPU = -lm -lpthread
DEFS =
ifeq ($(DDP),1)
DEFS += -DZERO3_DDP_ONLY
endif
ifeq ($(USE_MPI),1)
CC_CPU ?= mpicc
DEFS += -DUSE_MPI
else
CC_CPU ?= gcc
endif
# The pieces, bottom up: the process layer (proc/proc.c: rank, errors, checked allocation, clock) and the
# engine (zero3.c, the mechanism; observe/zero3_observe.c, what it measures); each device's backend and
# kernels (cpu/, gpu/), the backends including only those; the host library both trainers link (host/*.c:
# flags, train loop, passes, checkpoints, export, model file); on top, GPT-2's math per device
# (cpu/gpt2_cpu.c, gpu/gpt2_gpu.cuh: the compute tables, each beside its backend) and the trainers.
# The host AdamW (cpu/adamw.c) goes with the engine: the CPU backend runs it, and so does the GPU
# backend's optimizer under -oo host.
ENGINE_SRC = proc/proc.c zero3.c zero3_offload.c observe/zero3_observe.c cpu/adamw.c
HOST_SRC = $(wildcard host/*.c)
# the trainer's own files (host/trainer.h): what a program without the train loop leaves out
TRAINER_SRC = host/train.c host/outdir.c host/report.c host/evaluate.c host/stop.c
HOST_HEADERS = proc/proc.h proc/bf16.h proc/mpi_sum.h zero3.h zero3_offload.h observe/zero3_observe.h cpu/adamw.h $(wildcard host/*.h)
CPU_HEADERS = $(HOST_HEADERS) $(wildcard cpu/*.h)
# host code and the engine are compiled once into build/obj and linked into every binary
OBJDIR = build/obj
LIB_OBJS = $(patsubst %.c,$(OBJDIR)/%.o,$(ENGINE_SRC) $(HOST_SRC))
# one archive, so a program links only the pieces it uses (the engine's unit test needs no train loop)
LIB = $(OBJDIR)/libzero3.a
CPU_BACKEND_OBJ = $(OBJDIR)/cpu/backend_cpu$(if $(filter 1,$(USE_MPI)),_mpi,).o
# the CPU math (GPT2_CPU_COMPUTE) and the backend: what a CPU program links beside the library
CPU_OBJS = $(OBJDIR)/cpu/gpt2_cpu.o $(CPU_BACKEND_OBJ)

.PHONY: all cpu gpu test data dumps ddp clean library-sources
all: cpu
# the C sources of the engine and the host library, for builds outside this Makefile (the emulator's)
library-sources:
	@echo $(ENGINE_SRC) $(HOST_SRC)

cpu: train_gpt2_zero3 test_gpt2

$(OBJDIR)/%.o: %.c $(HOST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS) -c $< -o $@
$(LIB): $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^
# the backend and its AdamW without errno from math functions (they never read errno after one): the
# AdamW loop can then use the vector square root, with the same results
BACKEND_CFLAGS = -fno-math-errno
$(OBJDIR)/cpu/adamw.o: CFLAGS += $(BACKEND_CFLAGS)
$(OBJDIR)/cpu/backend_cpu_mpi.o: cpu/backend_cpu.c cpu/backend_cpu.h $(HOST_HEADERS)
	@mkdir -p $(dir $@)
	$(CC_CPU) $(CFLAGS) $(BACKEND_CFLAGS) -DUSE_MPI -c $< -o $@
$(OBJDIR)/cpu/backend_cpu.o: cpu/backend_cpu.c cpu/backend_cpu.h $(HOST_HEADERS)
	@mkdir -p $(dir $@)
	gcc $(CFLAGS) $(BACKEND_CFLAGS) -c $< -o $@
$(OBJDIR)/cpu/gpt2_cpu.o: cpu/gpt2_cpu.c $(CPU_HEADERS)
	@mkdir -p $(dir $@)
	gcc $(CFLAGS) -c $< -o $@

train_gpt2_zero3: train_gpt2_zero3.c $(CPU_HEADERS) $(LIB) $(CPU_OBJS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ train_gpt2_zero3.c $(CPU_OBJS) $(LIB) $(LDLIBS_CPU)

test_gpt2: test_gpt2.c tests/test_checks.h tests/dump.h $(CPU_HEADERS) $(LIB) $(CPU_OBJS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ test_gpt2.c $(CPU_OBJS) $(LIB) $(LDLIBS_CPU)

# The DDP build (stage 0 only) under build/ddp/, so tests can run it beside the ZeRO build.
ddp: build/ddp/train_gpt2_zero3 build/ddp/test_gpt2
build/ddp/train_gpt2_zero3: train_gpt2_zero3.c $(CPU_HEADERS) $(LIB) $(CPU_OBJS)
	@mkdir -p build/ddp
	$(CC_CPU) $(CFLAGS) $(DEFS) -DZERO3_DDP_ONLY -o $@ train_gpt2_zero3.c $(CPU_OBJS) $(LIB) $(LDLIBS_CPU)
build/ddp/test_gpt2: test_gpt2.c tests/test_checks.h tests/dump.h $(CPU_HEADERS) $(LIB) $(CPU_OBJS)
	@mkdir -p build/ddp
	$(CC_CPU) $(CFLAGS) $(DEFS) -DZERO3_DDP_ONLY -o $@ test_gpt2.c $(CPU_OBJS) $(LIB) $(LDLIBS_CPU)

# The engine's unit tests (tests/unit/test_NAME.c -> build/test_NAME), each linked with the engine,
# the host library and the CPU backend (no transport):
#   test_engine_layout    layout, padding, decay masks, theory
#   test_engine_schedule  the prefetch schedule and the peak memory against a model of the live buffers
#   test_pass_order       the passes against a fake compute: the order of gathers, releases, reductions
#   test_engine_contract  the engine against the contract written out by hand; exposed time against a clock
#   test_quantize         ZeRO++'s block quantization through the CPU backend, N = 1..5
UNIT_TESTS = test_engine_layout test_engine_schedule test_pass_order test_engine_contract test_quantize test_stop_path test_sampler
$(addprefix build/,$(UNIT_TESTS)): build/test_%: tests/unit/test_%.c tests/unit/recording_backend.h $(OBJDIR)/cpu/backend_cpu.o $(LIB) $(HOST_HEADERS)
	@mkdir -p build
	$(CC_CPU) $(CFLAGS) -o $@ $< $(OBJDIR)/cpu/backend_cpu.o $(LIB) $(LDLIBS_CPU)

# CPU benchmarks: the measured instruction peaks (fp32 FMA, VDPBF16PS), and the bf16 matmuls beside
# the fp32 ones as fractions of them (tools/bench/bench_peak.c, tools/bench/bench_bf16_kernels.c say how to run them)
.PHONY: bench_peak bench_bf16_kernels bench_floor bench_io bench_collectives
bench_peak: build/bench_peak
bench_io: build/bench_io
bench_collectives: build/bench_collectives
bench_floor: build/bench_floor
bench_bf16_kernels: build/bench_bf16_kernels
build/bench_peak: tools/bench/bench_peak.c tools/bench/bench_peak.h
	@mkdir -p build
	gcc $(CFLAGS) -o $@ $< -lm
build/bench_floor: tools/bench/bench_floor.c tools/bench/bench_peak.h
	@mkdir -p build
	gcc $(CFLAGS) -o $@ $< -lm
# the collectives between the ranks of one machine against a memory copy of their bytes
build/bench_collectives: tools/bench/bench_collectives.c $(OBJDIR)/cpu/backend_cpu_mpi.o $(LIB)
	@mkdir -p build
	$(CC_CPU) $(CFLAGS) -o $@ $< $(OBJDIR)/cpu/backend_cpu_mpi.o $(LIB) $(LDLIBS_CPU)
# the offload stream's I/O by pread threads and by io_uring (the latter only with liburing-dev)
build/bench_io: tools/bench/bench_io.c
	@mkdir -p build
	gcc $(CFLAGS) -o $@ $< -lpthread $(if $(wildcard /usr/include/liburing.h),-luring)
build/bench_bf16_kernels: tools/bench/bench_bf16_kernels.c tools/bench/bench_peak.h cpu/kernels_bf16.h cpu/kernels.h proc/bf16.h
	@mkdir -p build
	gcc $(CFLAGS) -o $@ $< -lm

# ---------------------------------------------------------------- data and reference dumps
# DATA_ARGS="--input ../shared/data/tinyshakespeare/input.txt --vocab ../shared/data/gpt2" to use local copies
data:
	/usr/bin/env python3 data/tinyshakespeare.py $(DATA_ARGS) || /usr/bin/python3 data/tinyshakespeare.py $(DATA_ARGS)

# the PyTorch reference model and activation dump the tests compare against, each beside the token
# file it trained on (tests/reference/dumps/NAME.dump, NAME_model.bin, NAME_tokens.bin):
#   tiny:  L=3 C=72 NH=3 with GPT-2's vocabulary, 10 steps;
#   small: the same with V=1024 (ids taken mod 1024), for the multi-rank tests, where the 50257-row
#          LM head would dominate the run time;
#   clip:  small with the clip threshold at 1.2 and 12 steps, so that clipping is on in some steps
#          (norms 2.46, 2.11, 1.37, 1.30, 1.24) and off in the others (1.18 ... 1.00).
#   hs64:  L=2 C=128 NH=2, GPT-2's head size 64 (the GPU's 64-wide attention kernels), V=1024, B=4 T=64.
REF_SMALL = --L 3 --C 72 --NH 3 --V 1024 --maxT 64 --B 12 --T 32 --seed 1337 --tokens tests/reference/dumps/small_tokens.bin
REF_HS64 = --L 2 --C 128 --NH 2 --V 1024 --maxT 64 --B 4 --T 64 --seed 1337 --tokens tests/reference/dumps/hs64_tokens.bin
dumps: tests/reference/dumps/tiny.dump tests/reference/dumps/tiny_tokens.bin tests/reference/dumps/small.dump tests/reference/dumps/clip.dump tests/reference/dumps/clip_tokens.bin \
       tests/reference/dumps/hs64.dump
tests/reference/dumps/tiny.dump: tests/reference/gpt2_reference.py data/tinyshakespeare/tiny_shakespeare_val.bin
	$(PYTHON) tests/reference/gpt2_reference.py --preset tiny
tests/reference/dumps/tiny_tokens.bin: data/tinyshakespeare/tiny_shakespeare_val.bin
	@mkdir -p tests/reference/dumps
	cp $< $@
tests/reference/dumps/small_tokens.bin: tests/reference/remap_tokens.py data/tinyshakespeare/tiny_shakespeare_val.bin
	@mkdir -p tests/reference/dumps
	$(PYTHON) tests/reference/remap_tokens.py data/tinyshakespeare/tiny_shakespeare_val.bin $@ 1024
tests/reference/dumps/small.dump: tests/reference/gpt2_reference.py tests/reference/dumps/small_tokens.bin
	$(PYTHON) tests/reference/gpt2_reference.py $(REF_SMALL) --model-out tests/reference/dumps/small_model.bin --dump-out tests/reference/dumps/small.dump
tests/reference/dumps/clip.dump: tests/reference/gpt2_reference.py tests/reference/dumps/small_tokens.bin
	$(PYTHON) tests/reference/gpt2_reference.py $(REF_SMALL) --clip 1.2 --steps 12 --model-out tests/reference/dumps/clip_model.bin --dump-out tests/reference/dumps/clip.dump
tests/reference/dumps/clip_tokens.bin: tests/reference/dumps/small_tokens.bin
	cp $< $@
tests/reference/dumps/hs64_tokens.bin: tests/reference/dumps/small_tokens.bin
	cp $< $@
tests/reference/dumps/hs64.dump: tests/reference/gpt2_reference.py tests/reference/dumps/hs64_tokens.bin
	$(PYTHON) tests/reference/gpt2_reference.py $(REF_HS64) --model-out tests/reference/dumps/hs64_model.bin --dump-out tests/reference/dumps/hs64.dump

# ---------------------------------------------------------------- GPU (BEGIN GPU SECTION)
# The GPU trainer and its test, built with nvcc into the repository root:
#   make train_gpt2_zero3cu test_gpt2cu [PRECISION=BF16|FP32] [DDP=1] [USE_MPI=0] [GPU_COMPUTE_CAPABILITY=90]
#        [ATTENTION=flash|portable|materialized]
#   make cuda_kernels      build and run every kernel check in tests/cuda (needs a GPU)
#   make gpu_first         scripts/gpu_first.sh: a time-boxed first run on a rented GPU (docs/gpu.md)
#   make gpu_check         scripts/gpu_check.sh: the whole GPU check (docs/DESIGN.md section 5)
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
NVCC_FLAGS ?= -O3 -std=c++17 -lineinfo -Xptxas --warn-on-spills -Xcompiler -fopenmp \
              -Xcompiler -Wall -Xcompiler -Wno-unused-function -Xcompiler -Wno-unused-parameter
NVCC_ARCH = -arch=sm_$(GPU_COMPUTE_CAPABILITY)
ifeq ($(PRECISION),FP32)
NVCC_DEFS = -DENABLE_FP32
else ifeq ($(PRECISION),BF16)
NVCC_DEFS = -DENABLE_BF16
else
$(error PRECISION must be BF16 or FP32, got '$(PRECISION)')
endif
ifeq ($(DDP),1)
NVCC_DEFS += -DZERO3_DDP_ONLY
endif
# ATTENTION=flash (default): fused attention, no T x T matrix: on tensor cores in BF16 builds
#   (gpu/flash_attention_tc.cuh), the portable fp32 kernels in FP32 builds (gpu/flash_attention.cuh);
# ATTENTION=portable: the portable fused kernels in BF16 builds too;
# ATTENTION=materialized: scores and probabilities in memory, cuBLAS batched GEMMs (gpu/attention.cuh)
ATTENTION ?= flash
ifeq ($(ATTENTION),materialized)
NVCC_DEFS += -DATTENTION_MATERIALIZED
else ifeq ($(ATTENTION),portable)
NVCC_DEFS += -DATTENTION_PORTABLE
else ifneq ($(ATTENTION),flash)
$(error ATTENTION must be flash, portable or materialized, got '$(ATTENTION)')
endif
# MPI: the GPU programs include mpi.h with USE_MPI=1, the default. Where there is no mpi.h (a GPU
# machine's image often has none) the build goes without MPI by itself (ranks started by
# scripts/launch.sh) and says so; USE_MPI=1 given on the command line there is refused in one line.
MPICC ?= mpicc
GPU_HAVE_MPI = $(eval GPU_HAVE_MPI := $(shell $(MPICC) --showme:compile >/dev/null 2>&1 && echo 1))$(GPU_HAVE_MPI)
GPU_USE_MPI = $(if $(filter 1,$(USE_MPI)),$(if $(GPU_HAVE_MPI),1,$(if $(filter command line,$(origin USE_MPI)),refused,0)),0)
GPU_MPI_DEFS = $(if $(filter 1,$(GPU_USE_MPI)),-DUSE_MPI $(shell $(MPICC) --showme:compile) $(shell $(MPICC) --showme:link))
# cuBLASLt, cuBLAS, NCCL and the nvtx3 headers: from the toolkit, the system or PyTorch's wheels,
# whichever has them first (scripts/gpu_find_libs.sh; -L and an rpath for each folder), asked once
# and only when a GPU program is built. NCCL_HOME=DIR names NCCL's folder instead (DIR/include/nccl.h,
# DIR/lib/libnccl.so or libnccl.so.2).
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
GPU_FOUND_FLAGS = $(eval GPU_FOUND_FLAGS := $(shell CUDA_HOME=$(CUDA_HOME) PYTHON=$(PYTHON) bash scripts/gpu_find_libs.sh --flags))$(GPU_FOUND_FLAGS)
NCCL_HOME ?=
ifneq ($(NCCL_HOME),)
NCCL_FLAGS = -I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib \
             $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so),-lnccl,-l:libnccl.so.2)
endif
GPU_LIBS = $(NCCL_FLAGS) $(GPU_FOUND_FLAGS) -lgomp -lpthread
GPU_SOURCES = $(wildcard gpu/*.cuh) $(HOST_HEADERS)
# The engine and the host library are C, compiled by gcc into build/gpu_obj and linked, exactly the
# sources the CPU trainer links (host headers declare them with C linkage for the .cu files).
GPU_OBJDIR = build/gpu_obj
GPU_HOST_CFLAGS = -O2 -std=gnu11 -Wall -Wno-unused-function -Wno-unused-parameter
GPU_LIB_OBJS = $(patsubst %.c,$(GPU_OBJDIR)/%.o,$(ENGINE_SRC) $(HOST_SRC))
GPU_LIB = $(GPU_OBJDIR)/libzero3.a
$(GPU_OBJDIR)/%.o: %.c $(HOST_HEADERS)
	@mkdir -p $(dir $@)
	gcc $(GPU_HOST_CFLAGS) -c $< -o $@
# the host AdamW (-oo host) on every core, with the vector square root
$(GPU_OBJDIR)/cpu/adamw.o: GPU_HOST_CFLAGS += -fopenmp -fno-math-errno
$(GPU_LIB): $(GPU_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

# a GPU program asked for with USE_MPI=1 where there is no mpi.h: refused before anything is built
ifneq ($(filter train_gpt2_zero3cu test_gpt2cu gpu,$(MAKECMDGOALS)),)
ifeq ($(GPU_USE_MPI),refused)
$(error USE_MPI=1 but $(MPICC) finds no mpi.h here: build with USE_MPI=0 (ranks through scripts/launch.sh))
endif
endif
# before a GPU program is built: one line per library not found, and a line when the build goes
# without MPI by itself
gpu_prerequisites:
	@if [ "$(USE_MPI)" = 1 ] && [ "$(GPU_USE_MPI)" = 0 ]; then echo "note: no mpi.h here ($(MPICC)): building without MPI, as USE_MPI=0 (ranks through scripts/launch.sh)"; fi
	@missing=$$(CUDA_HOME=$(CUDA_HOME) PYTHON=$(PYTHON) bash scripts/gpu_find_libs.sh --report | grep 'NOT FOUND' $(if $(NCCL_HOME),| grep -v '^NCCL')); \
	  [ -z "$$missing" ] || { echo "$$missing" | sed 's/^/error: /' >&2; exit 1; }

train_gpt2_zero3cu: train_gpt2_zero3.cu $(GPU_SOURCES) $(GPU_LIB) | gpu_prerequisites
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(NVCC_DEFS) $(GPU_MPI_DEFS) -o $@ train_gpt2_zero3.cu $(GPU_LIB) $(GPU_LIBS)

test_gpt2cu: test_gpt2.cu tests/test_checks.h tests/dump.h $(GPU_SOURCES) $(GPU_LIB) | gpu_prerequisites
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(NVCC_DEFS) $(GPU_MPI_DEFS) -o $@ test_gpt2.cu $(GPU_LIB) $(GPU_LIBS)

gpu: train_gpt2_zero3cu test_gpt2cu

cuda_kernels:
	$(MAKE) -C tests/cuda run GPU_COMPUTE_CAPABILITY=$(GPU_COMPUTE_CAPABILITY)

gpu_first:
	bash scripts/gpu_first.sh

gpu_check:
	bash scripts/gpu_check.sh

.PHONY: cuda_kernels gpu_first gpu_check gpu_prerequisites
# (END GPU SECTION)

# ---------------------------------------------------------------- operations (checkpoint, export, fuzz)
# libFuzzer harnesses for every file reader (tests/fuzz/; tests/test_fuzz.sh runs them), built with
# clang's -fsanitize=fuzzer plus ASan and UBSan (Debian: clang, libclang-rt-14-dev), with the engine
# and the host library compiled into each under the same sanitizers.
FUZZ_CC ?= clang
FUZZ_FLAGS = -g -O1 -std=gnu11 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB = $(ENGINE_SRC) $(filter-out $(TRAINER_SRC),$(HOST_SRC))
FUZZ_HARNESSES = model tokens tokenizer dump checkpoint
.PHONY: fuzz
fuzz: $(FUZZ_HARNESSES:%=build/fuzz/fuzz_%) build/fuzz/make_seeds
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_LIB) $(HOST_HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< $(FUZZ_LIB) -lm
build/fuzz/make_seeds: tests/fuzz/make_seeds.c tests/fuzz/fuzz_common.h $(FUZZ_LIB) $(HOST_HEADERS)
	@mkdir -p build/fuzz
	gcc -O1 -std=gnu11 -I. -o $@ $< $(FUZZ_LIB) -lm
# the CPU trainer exporting model.bin as bf16 (llm.c version 5), for tests/test_export.sh
build/ops/train_gpt2_zero3_bf16export: train_gpt2_zero3.c $(CPU_HEADERS) $(LIB) $(CPU_OBJS)
	@mkdir -p build/ops
	$(CC_CPU) $(CFLAGS) $(DEFS) -DTRAIN_EXPORT_VERSION=5 -o $@ train_gpt2_zero3.c $(CPU_OBJS) $(LIB) $(LDLIBS_CPU)

# ---------------------------------------------------------------- tests
test:
	bash tests/run_all.sh

# what several tests build, built once before they start (tests/run_all.sh runs two at a time, and two
# makes writing one file at once would corrupt it)
test_prerequisites: train_gpt2_zero3 test_gpt2 ddp dumps build/ops/train_gpt2_zero3_bf16export \
                    $(addprefix build/,$(UNIT_TESTS)) $(OBJDIR)/cpu/backend_cpu_mpi.o $(LIB)
.PHONY: test_prerequisites

# the whole mutation table (tests/mutation_check.sh: 44 planted bugs, about 15 minutes on 2 cores): nightly
mutations:
	bash tests/mutation_check.sh
.PHONY: mutations

clean:
	rm -rf train_gpt2_zero3 train_gpt2_zero3cu test_gpt2 test_gpt2cu *.o build
