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

// NOTE [list buffers] An op given a list of tensors runs on one flat buffer.
// Where the list's CPU tensors are contiguous views laid end to end in one
// storage, in order (list(t.chunk(n)), t.split(k): the usual way to pass a
// gather's or an all_gather's outputs), that buffer is a view of them and
// nothing is copied. Otherwise it is one of two per-thread CPU scratch
// buffers (`slot` 0 for inputs, 1 for outputs), kept and grown, never handed
// to the caller: a fresh allocation per call would fault in every page of a
// large buffer again (gather of 1M: 1.2 ms against 0.16 for all_gather on 2
// cores). A CPU call runs to its end on the calling thread, so one call's
// scratch is free when the next begins. CUDA tensors keep a fresh tensor
// from the caching allocator (stream-ordered).

// The elements of `ts` in order, in one contiguous tensor: `ts[0]` itself
// (whatever its shape) when there is one contiguous tensor, a view of them
// when they lie end to end (NOTE [list buffers]), else a copy. Callers read
// its data pointer, numel and options only.
at::Tensor flat_of(const std::vector<at::Tensor>& ts);
at::Tensor flat_of(const at::Tensor& t);  // the one-tensor case, without building a list
// A contiguous buffer to receive `numel` elements for `ts`: `ts[0]` itself
// when it is one contiguous tensor of that size, a view of them when they lie
// end to end, else scratch (NOTE [list buffers]).
at::Tensor flat_out_for(const std::vector<at::Tensor>& ts, int64_t numel, const at::Tensor& like);
// An uninitialised 1-D buffer of `numel` elements like `like`, for the
// duration of one call (NOTE [list buffers]): CPU scratch `slot`, or a new
// tensor for other devices.
at::Tensor call_buffer(int64_t numel, const at::Tensor& like, int slot);
// Copies `flat` back into `ts` (in order) unless flat already is them.
void unflatten_into(const at::Tensor& flat, std::vector<at::Tensor>& ts);
void unflatten_into(const at::Tensor& flat, at::Tensor& t);  // the one-tensor case

// Local checks shared by ops: all tensors share the dtype of ts[0]; message on failure.
std::string check_same_dtype(const std::vector<at::Tensor>& ts);

}  // namespace purlin::backend
