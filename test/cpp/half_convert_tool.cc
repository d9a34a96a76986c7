// half_convert_tool.cc — runs half_convert.h over a file, for the torch
// bit-exactness test in test/cpp/test_atom_cpu_native.py.
//   half_convert_tool narrow f16|bf16 IN OUT   IN: float32 values, OUT: uint16 bits
//   half_convert_tool widen  f16|bf16 IN OUT   IN: uint16 bits,    OUT: float32 values
// The loops are the same shape as reduce_cpu's passes (and vectorize the same
// way); test_reduce_cpu ties the kernel to these conversions.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "atom/cpu/half_convert.h"

namespace cv = purlin::atom::cpu;

template <class T>
std::vector<T> slurp(const char* path) {
  std::vector<T> v;
  if (FILE* f = std::fopen(path, "rb")) {
    T x;
    while (std::fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
    std::fclose(f);
  }
  return v;
}

template <class T>
bool spill(const char* path, const std::vector<T>& v) {
  FILE* f = std::fopen(path, "wb");
  if (!f) return false;
  const bool ok = std::fwrite(v.data(), sizeof(T), v.size(), f) == v.size();
  return std::fclose(f) == 0 && ok;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s narrow|widen f16|bf16 IN OUT\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], fmt = argv[2];
  const bool f16 = fmt == "f16";
  if (mode == "narrow") {
    std::vector<float> in = slurp<float>(argv[3]);
    std::vector<uint16_t> out(in.size());
    for (size_t i = 0; i < in.size(); ++i) out[i] = f16 ? cv::f32_to_f16(in[i]) : cv::f32_to_bf16(in[i]);
    return spill(argv[4], out) ? 0 : 1;
  }
  std::vector<uint16_t> in = slurp<uint16_t>(argv[3]);
  std::vector<float> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = f16 ? cv::f16_to_f32(in[i]) : cv::bf16_to_f32(in[i]);
  return spill(argv[4], out) ? 0 : 1;
}
