// ipc_peers.cc — see ipc_peers.h.
#include "atom/cuda/host/ipc_peers.h"

#include <algorithm>
#include <cstring>

#include "atom/cuda/host/cuda_check.h"
#include "common/hex.h"

namespace purlin::atom::cuda {

std::string failure_answer(const std::string& msg) { return "E" + to_hex(msg.data(), msg.size()); }

std::string first_failure(const std::vector<std::string>& answers, char ok) {
  for (size_t r = 0; r < answers.size(); ++r)
    if (answers[r].empty() || answers[r][0] != ok) {
      const std::string msg = answers[r].empty() ? std::string("no answer") : from_hex(answers[r].substr(1));
      return "rank " + std::to_string(r) + ": " + msg;
    }
  return "";
}

std::string handle_answer(const cudaIpcMemHandle_t& handle) { return "H" + to_hex(&handle, sizeof handle); }

std::string open_ipc_peers(const std::vector<std::string>& handles, int rank, void* self, const char* what,
                           std::vector<void*>* peers, std::vector<uint64_t>* table) {
  const int world = static_cast<int>(handles.size());
  peers->assign(world, nullptr);
  table->assign(world, 0);
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      (*table)[r] = reinterpret_cast<uint64_t>(self);
      continue;
    }
    cudaIpcMemHandle_t h;
    const std::string raw = from_hex(handles[r].substr(1));
    std::memcpy(&h, raw.data(), std::min(raw.size(), sizeof h));
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return cuda_error_text(e, ("cudaIpcOpenMemHandle of rank " + std::to_string(r) + "'s " + what).c_str());
    }
    (*peers)[r] = p;
    (*table)[r] = reinterpret_cast<uint64_t>(p);
  }
  return "";
}

std::string write_device_table(uint64_t* dst, const std::vector<uint64_t>& table, const char* what) {
  RelaxedCaptureMode relaxed;
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) {
    e = cudaMemcpyAsync(dst, table.data(), table.size() * sizeof(uint64_t), cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
  }
  if (e == cudaSuccess) return "";
  cudaGetLastError();
  return cuda_error_text(e, (std::string("writing the ") + what).c_str());
}

void close_ipc_peers(std::vector<void*>* peers) {
  for (void* p : *peers)
    if (p) cudaIpcCloseMemHandle(p);
  peers->clear();
}

}  // namespace purlin::atom::cuda
