// tools/emu/include/cublas_v2.h: the emulator's cuBLAS (emu_blas.h holds the GEMMs).
#pragma once
#include "emu_blas.h"
