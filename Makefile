# Build for the ZeRO-3 GPT-2 trainer. Switches:
#   PRECISION=BF16|FP32     GPU precision (CPU trainer is always FP32)          default BF16
#   DDP=1                   build the same binaries fixed at ZeRO stage 0 (plain all-reduce)
#   USE_MPI=0|1             0: no MPI (one rank on CPU; scripts/launch.sh on GPU) default 1
#   GPU_COMPUTE_CAPABILITY  nvcc -arch=sm_XX                                      default 90
PRECISION ?= BF16
DDP ?= 0
USE_MPI ?= 1
GPU_COMPUTE_CAPABILITY ?= 90
# Python with torch: the first of python3 / /usr/bin/python3 that imports torch (Debian's torch
# lives under /usr/bin/python3; a GPU machine's PyTorch is on PATH).
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import torch' >/dev/null 2>&1 && { echo $$p; break; }; done)
ifeq ($(PYTHON),)
PYTHON := /usr/bin/python3
endif

# ---------------------------------------------------------------- CPU
CFLAGS ?= -O3 -march=native -Wall -Wextra -Wno-unused-parameter -Wno-unused-function
CFLAGS += -fopenmp -std=gnu11
LDLIBS_CPU = -lm
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
HOST_HEADERS = $(wildcard *.h)

.PHONY: all cpu gpu test data dumps ddp clean
all: cpu

cpu: train_gpt2_zero3 test_gpt2

train_gpt2_zero3: train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ train_gpt2_zero3.c zero3.c $(LDLIBS_CPU)

test_gpt2: test_gpt2.c train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ test_gpt2.c zero3.c $(LDLIBS_CPU)

# The DDP build (stage 0 only) under build/ddp/, so tests can run it beside the ZeRO build.
ddp: build/ddp/train_gpt2_zero3 build/ddp/test_gpt2
build/ddp/train_gpt2_zero3: train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	@mkdir -p build/ddp
	$(CC_CPU) $(CFLAGS) $(DEFS) -DZERO3_DDP_ONLY -o $@ train_gpt2_zero3.c zero3.c $(LDLIBS_CPU)
build/ddp/test_gpt2: test_gpt2.c train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	@mkdir -p build/ddp
	$(CC_CPU) $(CFLAGS) $(DEFS) -DZERO3_DDP_ONLY -o $@ test_gpt2.c zero3.c $(LDLIBS_CPU)

# engine unit tests (no transport)
build/test_engine_layout: dev/test_engine_layout.c zero3.c zero3.h gpt2.h common.h
	@mkdir -p build
	gcc $(CFLAGS) -I. -o $@ dev/test_engine_layout.c zero3.c $(LDLIBS_CPU)

# ---------------------------------------------------------------- data and reference dumps
# DATA_ARGS="--input ../shared/data/tinyshakespeare/input.txt --vocab ../shared/data/gpt2" to use local copies
data:
	/usr/bin/env python3 data/tinyshakespeare.py $(DATA_ARGS) || /usr/bin/python3 data/tinyshakespeare.py $(DATA_ARGS)

# the PyTorch reference model and activation dump the tests compare against
# tiny: L=3 C=72 NH=3 with GPT-2's vocabulary; small: the same with V=1024 (ids taken mod 1024), for
# the multi-rank tests, where the 50257-row LM head would dominate the run time.
dumps: dev/ref/tiny.dump dev/ref/small.dump
dev/ref/tiny.dump: dev/gpt2_reference.py data/tinyshakespeare/tiny_shakespeare_val.bin
	$(PYTHON) dev/gpt2_reference.py --preset tiny
dev/ref/small.dump: dev/gpt2_reference.py dev/remap_tokens.py data/tinyshakespeare/tiny_shakespeare_val.bin
	@mkdir -p dev/ref
	$(PYTHON) dev/remap_tokens.py data/tinyshakespeare/tiny_shakespeare_val.bin dev/ref/val_v1024.bin 1024
	$(PYTHON) dev/gpt2_reference.py --L 3 --C 72 --NH 3 --V 1024 --maxT 64 --B 12 --T 32 --seed 1337 \
		--tokens dev/ref/val_v1024.bin --model-out dev/ref/small_model.bin --dump-out dev/ref/small.dump

# ---------------------------------------------------------------- GPU (BEGIN GPU SECTION)
# The GPU trainer and its test, built with nvcc into the repository root:
#   make train_gpt2_zero3cu test_gpt2cu [PRECISION=BF16|FP32] [DDP=1] [USE_MPI=0] [GPU_COMPUTE_CAPABILITY=90]
#   make cuda_kernels      build and run every kernel check in dev/cuda (needs a GPU)
#   make gpu_check         scripts/gpu_check.sh: the whole GPU check (DESIGN.md section 5)
# NCCL: the CUDA toolkit's by default; NCCL_HOME=DIR for another one, e.g. the nvidia/nccl folder of
# PyTorch's wheels (DIR/include/nccl.h, DIR/lib/libnccl.so or libnccl.so.2; linked with an rpath).
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
ifeq ($(USE_MPI),1)
NVCC_DEFS += -DUSE_MPI
GPU_MPI_FLAGS = $(shell mpicc --showme:compile 2>/dev/null) $(shell mpicc --showme:link 2>/dev/null || echo -lmpi)
endif
NCCL_HOME ?=
ifneq ($(NCCL_HOME),)
NCCL_FLAGS = -I$(NCCL_HOME)/include -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib \
             $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so),-lnccl,-l:libnccl.so.2)
else
NCCL_FLAGS = -lnccl
endif
# the toolkit's libraries by rpath too: a machine whose loader does not know /usr/local/cuda/lib64
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
GPU_LIBS = -lcublasLt -lcublas -lgomp -Xlinker -rpath=$(CUDA_HOME)/lib64
GPU_SOURCES = $(wildcard gpu/*.cuh) $(HOST_HEADERS)
# The shared host headers are valid C++ and are included by the .cu files, as by the CPU trainer;
# only the engine (zero3.c) is compiled as C, with gcc, and linked.
GPU_OBJDIR = build/gpu_$(PRECISION)_ddp$(DDP)
GPU_HOST_CFLAGS = -O2 -std=gnu11 -Wall -Wno-unused-function -Wno-unused-parameter $(NVCC_DEFS)

$(GPU_OBJDIR)/zero3.o: zero3.c zero3.h
	@mkdir -p $(GPU_OBJDIR)
	gcc $(GPU_HOST_CFLAGS) -c zero3.c -o $@

train_gpt2_zero3cu: train_gpt2_zero3.cu $(GPU_SOURCES) $(GPU_OBJDIR)/zero3.o
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(NVCC_DEFS) -o $@ train_gpt2_zero3.cu $(GPU_OBJDIR)/zero3.o $(NCCL_FLAGS) $(GPU_MPI_FLAGS) $(GPU_LIBS)

test_gpt2cu: test_gpt2.cu train_gpt2_zero3.cu $(GPU_SOURCES) $(GPU_OBJDIR)/zero3.o
	$(NVCC) $(NVCC_FLAGS) $(NVCC_ARCH) $(NVCC_DEFS) -o $@ test_gpt2.cu $(GPU_OBJDIR)/zero3.o $(NCCL_FLAGS) $(GPU_MPI_FLAGS) $(GPU_LIBS)

gpu: train_gpt2_zero3cu test_gpt2cu

cuda_kernels:
	$(MAKE) -C dev/cuda run GPU_COMPUTE_CAPABILITY=$(GPU_COMPUTE_CAPABILITY)

gpu_check:
	bash scripts/gpu_check.sh

.PHONY: cuda_kernels gpu_check
# (END GPU SECTION)

# ---------------------------------------------------------------- operations (checkpoint, export, fuzz)
# libFuzzer harnesses for every file reader (fuzz/; tests/test_fuzz.sh runs them), built with clang's
# -fsanitize=fuzzer plus ASan and UBSan (Debian: clang, libclang-rt-14-dev).
FUZZ_CC ?= clang
FUZZ_FLAGS = -g -O1 -std=gnu11 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_HARNESSES = model tokens tokenizer dump checkpoint
.PHONY: fuzz
fuzz: $(FUZZ_HARNESSES:%=build/fuzz/fuzz_%) build/fuzz/make_seeds
build/fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h zero3.c $(HOST_HEADERS)
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< zero3.c -lm
build/fuzz/make_seeds: fuzz/make_seeds.c fuzz/fuzz_common.h zero3.c $(HOST_HEADERS)
	@mkdir -p build/fuzz
	gcc -O1 -std=gnu11 -I. -o $@ $< zero3.c -lm
# the CPU trainer exporting model.bin as bf16 (llm.c version 5), for tests/test_export.sh
build/ops/train_gpt2_zero3_bf16export: train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	@mkdir -p build/ops
	$(CC_CPU) $(CFLAGS) $(DEFS) -DTRAIN_EXPORT_VERSION=5 -o $@ train_gpt2_zero3.c zero3.c $(LDLIBS_CPU)

# ---------------------------------------------------------------- tests
test:
	bash tests/run_all.sh

clean:
	rm -rf train_gpt2_zero3 train_gpt2_zero3cu test_gpt2 test_gpt2cu *.o build
