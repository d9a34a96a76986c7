// types.h — element types and reduction operators shared by every layer.
// No torch headers: the backend maps at::ScalarType onto DType in one place
// (to_dtype in csrc/backend/c10d/tensor_args.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace purlin {

enum class DType : uint8_t {
  Float32 = 0, Float64, Float16, BFloat16,
  Int8, Int16, Int32, Int64, UInt8, Bool,
  Complex64, Complex128,
  kCount
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool dtype_is_floating(DType t);   // float32/64, float16, bfloat16
bool dtype_is_complex(DType t);

enum class RedOp : uint8_t { Sum = 0, Avg = 1, Product = 2, Min = 3, Max = 4, PremulSum = 5 };

const char* redop_name(RedOp op);

// Whether `op` is defined for `t` (e.g. MIN/MAX on complex is not, AVG on
// integers is not). On false, `why` says what is wrong in one phrase.
bool reduction_supported(DType t, RedOp op, const char** why);

}  // namespace purlin
