// env.h — the one registry of TORCH_PURLIN_* environment variables.
//
// Every variable the project reads is listed in env.cc with its default and
// meaning; code reads them only through these accessors. The table is exported
// to Python (torch_purlin.env_vars()) and shown in the README.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace purlin::env {

struct Var {
  const char* name;
  const char* default_value;
  const char* meaning;
};

const std::vector<Var>& registry();

// Value of a registered variable (its default when unset). Throws
// std::invalid_argument for a name missing from the registry.
std::string get(const char* name);
int64_t get_bytes(const char* name);  // accepts K/M/G suffixes (powers of 1024)
// A byte count as get_bytes reads it; `what` names it in the error.
int64_t parse_bytes(const std::string& text, const std::string& what);
bool get_bool(const char* name);      // 1/true/yes/on
int get_int(const char* name);        // std::stoi's reading; "NAME: not a number: '...'" otherwise
// Comma-separated list, lower-cased, empty items dropped.
std::vector<std::string> get_list(const char* name);
// The same split of any text (a value agreed between ranks, say).
std::vector<std::string> split_list(const std::string& text);

}  // namespace purlin::env
