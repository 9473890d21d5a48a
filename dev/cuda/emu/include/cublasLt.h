#pragma once
#include "emu_blas.h"
