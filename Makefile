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

.PHONY: all cpu gpu test data dumps clean
all: cpu

cpu: train_gpt2_zero3 test_gpt2

train_gpt2_zero3: train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ train_gpt2_zero3.c zero3.c $(LDLIBS_CPU)

test_gpt2: test_gpt2.c train_gpt2_zero3.c zero3.c $(HOST_HEADERS)
	$(CC_CPU) $(CFLAGS) $(DEFS) -o $@ test_gpt2.c zero3.c $(LDLIBS_CPU)

# ---------------------------------------------------------------- data and reference dumps
data:
	$(PYTHON) data/tinyshakespeare.py $(DATA_ARGS)

# ---------------------------------------------------------------- GPU (BEGIN GPU SECTION)
# (END GPU SECTION)

# ---------------------------------------------------------------- tests
test:
	bash tests/run_all.sh

clean:
	rm -f train_gpt2_zero3 train_gpt2_zero3cu test_gpt2 test_gpt2cu *.o
