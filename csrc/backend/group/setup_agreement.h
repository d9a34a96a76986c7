// setup_agreement.h — agree_on_setup(): every rank states whether its own
// setup of a group can proceed before any rank waits on another's;
// agree_on_settings(): the same when the group is made, with every rank's
// values of the settings that must be equal (NOTE [settings across ranks]).
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
//   The settings themselves are agreed earlier, when the group is made
//   (PurlinBackend's constructor, in init_process_group, new_group or
//   split_group, which every member calls): each rank publishes whether it
//   can read every setting of its snapshot (NOTE [group settings]) and its
//   values of the equal ones, so a setting that differs between ranks
//   raises there, on every rank, naming it, each rank's value and where the
//   value came from -- before any rank routes a call by it (a forced
//   fallback on one rank, a two-shot threshold) and waits for a peer that
//   routed the same call elsewhere.
#pragma once

#include <string>

#include "backend/group/group_context.h"
#include "backend/group/shm_group.h"

namespace purlin::backend {

// Publishes `my_error` ("" = this rank can proceed) under key + rank and
// reads every rank's. Returns "" if every rank can proceed, else one line
// naming each failing rank and its reason.
std::string agree_on_setup(const Rendezvous& rdv, const std::string& key, int rank, int world,
                           const std::string& my_error);

// Publishes this rank's settings record under key + rank: whether each of
// ctx.settings can be read as its kind (and `my_error`, another reason this
// rank cannot use its settings, "" if none), and the values of the settings
// that must be equal. Returns "" if every rank can proceed with equal values,
// else one line naming each rank that cannot and why, and each setting that
// differs with every rank's value (ranks named by ctx.rank_name).
std::string agree_on_settings(const Rendezvous& rdv, const std::string& key, int rank, int world,
                              const GroupContext& ctx, const std::string& my_error);

}  // namespace purlin::backend
