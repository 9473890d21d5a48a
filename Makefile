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
dumps: dev/ref/tiny.dump
dev/ref/tiny.dump: dev/gpt2_reference.py data/tinyshakespeare/tiny_shakespeare_val.bin
	$(PYTHON) dev/gpt2_reference.py --preset tiny

# ---------------------------------------------------------------- GPU (BEGIN GPU SECTION)
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
