// interned_names.h — a small process-wide table of static strings
// (collective names, SNAC phases), so kernels and the copy-engine watchdog
// name them in error records by number. Host code; torch-free.
#pragma once

#include <cstdint>

namespace purlin::atom::cuda {

// The number of `s` (a string that outlives the process's use of it, a
// literal mostly), added on first use; 0 ("?") for nullptr or a full table.
uint16_t intern_name(const char* s);
const char* interned_name(uint32_t id);

}  // namespace purlin::atom::cuda
