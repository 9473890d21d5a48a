// NVTX stubs for the CPU emulator: ranges are no-ops.
#pragma once
inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePop() { return 0; }
inline void nvtxMarkA(const char*) {}
