// spanning_util.h — tensors as the parts of a group that spans hosts hand them
// to the engine: 1-D, contiguous, and viewed as bytes (NOTE [groups spanning
// hosts] in spanning_ops.cc).
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "backend/c10d/group_hosts.h"

namespace purlin::backend {

// t's elements in a 1-D tensor of stride 1: a view of t when t is contiguous with more than one
// element, else a copy. (is_contiguous() ignores the stride of a dimension of size 1, so a
// 1-element view such as t[1::2][:1] is contiguous with stride 2, and cannot be viewed as bytes.)
inline at::Tensor packed(const at::Tensor& t) {
  if (t.is_contiguous() && t.numel() > 1) return t.view({-1});
  if (t.is_contiguous() || t.numel() <= 1) return at::empty({t.numel()}, t.options()).copy_(t.reshape({-1}));
  return t.contiguous().view({-1});
}

// A packed tensor's bytes (the same memory), as the engine moves them: any dtype.
inline at::Tensor as_bytes(const at::Tensor& flat) { return flat.view(at::kByte); }

// `flat`'s bytes split into `k` equal consecutive rows (views), for the engine's list ops.
inline std::vector<at::Tensor> list_of_rows(const at::Tensor& flat, int k) {
  std::vector<at::Tensor> rows;
  const int64_t n = flat.numel() / k;
  for (int q = 0; q < k; ++q) rows.push_back(flat.narrow(0, q * n, n));
  return rows;
}

// dst = fold of rows[0 .. k-1] (rows: [k, n] contiguous of dst's dtype) under `redop` with
// purlin's CPU reduction (atom/cpu/reduce_cpu.h); `scaled`: PREMUL_SUM with red.factors, one per row.
void reduce_rows(at::Tensor& dst, const at::Tensor& rows, const Reduction& red, RedOp redop, bool scaled);

}  // namespace purlin::backend
