// ipc_peers.h — the steps every symmetric buffer (the workspace, the pool)
// takes to be mapped by every peer of a group through CUDA IPC.
//
// Buffers are set up by collective exchanges of one string per rank; an
// answer starting with an ok tag carries data (hex), any other answer is a
// failure text (hex after 'E'). Every rank decodes the same answers, so all
// take the same branch. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace purlin::atom::cuda {

// The answer that reports `msg` as this rank's failure.
std::string failure_answer(const std::string& msg);
// "rank r: <text>" for the first answer not starting with `ok`, or "".
std::string first_failure(const std::vector<std::string>& answers, char ok);
// This rank's answer for the handle exchange: 'H' + the handle, hex.
std::string handle_answer(const cudaIpcMemHandle_t& handle);

// Opens every peer's handle (the answers of the handle exchange) into
// peers[r] (nullptr for this rank) and fills table[r] with every rank's
// buffer as mapped here (`self` for this rank). "" or the local failure;
// `what` names the buffer in it ("workspace", "pool").
std::string open_ipc_peers(const std::vector<std::string>& handles, int rank, void* self, const char* what,
                           std::vector<void*>* peers, std::vector<uint64_t>* table);

// Closes what open_ipc_peers opened and empties `peers` (teardown: errors
// are not reported).
void close_ipc_peers(std::vector<void*>* peers);

// Copies `table` to device memory at `dst` and waits for it (a private
// stream, allowed while another stream captures a graph). "" or the failure.
std::string write_device_table(uint64_t* dst, const std::vector<uint64_t>& table, const char* what);

}  // namespace purlin::atom::cuda
