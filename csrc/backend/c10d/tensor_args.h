// tensor_args.h — turning c10d's tensor arguments into flat Requests.
//
// The one place where at::ScalarType / c10d::ReduceOp meet Purlin's DType /
// RedOp, and where lists and non-contiguous tensors are staged through flat
// temporaries (and copied back after the collective).
#pragma once

#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "backend/group/request.h"

namespace purlin::backend {

// false if Purlin has no native support for `t`.
bool to_dtype(at::ScalarType t, DType* out);
// Whether the gloo fallback takes CPU tensors of `t` (under `redop`, if given: bitwise ones
// need integers or bool). NOTE [fallback arguments]: the ops it does not take stay native.
bool gloo_takes(at::ScalarType t, const c10d::ReduceOp* redop);
// Why CPU tensors of `t` cannot run at all (neither natively nor on gloo), for a Request's error.
std::string dtype_refusal(at::ScalarType t);

// Fills rq.redop / rq.scale from `op` (rq.dtype set before); unsupported
// combinations are recorded in rq.error (reported on every rank), among them
// the bitwise ops on dtypes the gloo fallback does not take (gloo_takes).
void set_reduction(Request& rq, const c10d::ReduceOp& op);
// BAND, BOR, BXOR: reductions Purlin leaves to the fallback (PurlinBackend::fallback_reason).
bool bitwise_reduction(const c10d::ReduceOp& op);

// The elements of `ts` in order, in one contiguous tensor: `ts[0]` itself
// (whatever its shape) when there is one contiguous tensor, else a new 1-D
// tensor. Callers read its data pointer, numel and options only.
at::Tensor flat_of(const std::vector<at::Tensor>& ts);
at::Tensor flat_of(const at::Tensor& t);  // the one-tensor case, without building a list
// A contiguous buffer to receive `numel` elements for `ts`: `ts[0]` itself
// when it is one contiguous tensor of that size, else a new 1-D empty tensor.
at::Tensor flat_out_for(const std::vector<at::Tensor>& ts, int64_t numel, const at::Tensor& like);
// Copies `flat` back into `ts` (in order) unless flat already is ts[0].
void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& ts);
void unflatten_into(const at::Tensor& flat, at::Tensor& t);  // the one-tensor case

// Local checks shared by ops: all tensors share the dtype of ts[0]; message on failure.
std::string check_same_dtype(const std::vector<at::Tensor>& ts);

}  // namespace purlin::backend
