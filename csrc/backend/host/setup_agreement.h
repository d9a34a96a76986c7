// setup_agreement.h — agree_on_setup(): every rank states whether its own
// setup of a group can proceed before any rank waits on another's.
//
// NOTE [setup agreement] A group's first collective sets up shared state
//   (segments, mapped buffers) in steps where each rank waits for keys its
//   peers publish. A rank whose own setup fails early (a malformed
//   TORCH_PURLIN_* value) would never publish them, and its peers would
//   wait out the store timeout and report a missing key. So first every
//   rank publishes "ok" or its reason under one key per rank and reads
//   everyone's: all ranks then fail together, at once, each naming the
//   ranks that could not proceed and why. The waits are the Rendezvous's
//   (bounded by the store timeout).
#pragma once

#include <string>

#include "backend/host/shm_group.h"

namespace purlin::backend {

// Publishes `my_error` ("" = this rank can proceed) under key + rank and
// reads every rank's. Returns "" if every rank can proceed, else one line
// naming each failing rank and its reason.
std::string agree_on_setup(const Rendezvous& rdv, const std::string& key, int rank, int world,
                           const std::string& my_error);

}  // namespace purlin::backend
