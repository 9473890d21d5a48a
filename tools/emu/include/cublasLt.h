// tools/emu/include/cublasLt.h: the emulator's cuBLASLt (emu_blas.h holds the GEMMs).
#pragma once
#include "emu_blas.h"
