// types.cc — sizes, names and the dtype x reduction support table.
#include "common/types.h"

namespace purlin {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int8: return 1;
    case DType::Int16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::UInt8: return 1;
    case DType::Bool: return 1;
    case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    default: return 0;
  }
}

const char* dtype_name(DType t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int8",      "int16",
                                "int32",   "int64",   "uint8",   "bool",     "complex64", "complex128"};
  return t < DType::kCount ? names[static_cast<int>(t)] : "?";
}

bool dtype_is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool dtype_is_complex(DType t) { return t == DType::Complex64 || t == DType::Complex128; }

const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "SUM";
    case RedOp::Avg: return "AVG";
    case RedOp::Product: return "PRODUCT";
    case RedOp::Min: return "MIN";
    case RedOp::Max: return "MAX";
    case RedOp::PremulSum: return "PREMUL_SUM";
  }
  return "?";
}

bool reduction_supported(DType t, RedOp op, const char** why) {
  const char* reason = nullptr;
  if (dtype_is_complex(t) && (op == RedOp::Min || op == RedOp::Max))
    reason = "MIN/MAX are not defined for complex dtypes";
  else if (!dtype_is_floating(t) && !dtype_is_complex(t) && (op == RedOp::Avg || op == RedOp::PremulSum))
    reason = "AVG and PREMUL_SUM need a floating-point or complex dtype";
  if (why) *why = reason;
  return reason == nullptr;
}

}  // namespace purlin
