// env.h — the one registry of TORCH_PURLIN_* settings.
//
// Every variable the project reads is listed in env.cc with its default, its
// audience (user-facing: README; tuning and debugging: docs/TUNING.md), how
// the ranks of a group must agree on it, and its meaning. Code reads them only
// through a group's Settings (or, outside any group, the accessors below). The
// table is exported to Python (torch_purlin.env_vars()) and rendered into the
// README and docs/TUNING.md by torch_purlin/env_table.py.
//
// NOTE [settings across ranks] A setting is one of three kinds across the
// ranks of a group (Var::across):
//   local     a rank's own choice; ranks may differ (logging, launch style).
//   equal     must be equal on every rank: a difference changes which
//             protocol, plan or backend a rank picks for the same call, and
//             ends in wrong data, a call-tag error or a timeout later. Each
//             rank publishes its values when the group is made (NOTE [setup
//             agreement]); a difference raises there, on every rank, naming
//             the variable, each rank's value and where it came from.
//   combined  ranks may differ harmlessly: the group combines every rank's
//             value by the rule the meaning states (the smallest, rank 0's
//             ..., on only if every rank asks) when it sets up.
// Values are compared as they are read (byte counts as numbers, lists without
// order, case or spaces), so 256K and 262144 are equal.
//
// NOTE [group settings] A group reads its settings once, when it is made: the
// values given for it in torch_purlin.Options(settings=...) (its pg_options),
// else the environment of that moment, else the defaults. Its engines (CPU,
// CUDA, fallback) read that snapshot, never the environment later, so one
// process can hold groups made with different settings.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace purlin::env {

enum class Audience : uint8_t { User, Tuning };      // README / docs/TUNING.md
enum class Across : uint8_t { Local, Equal, Combined };  // NOTE [settings across ranks]
// How a value is read, checked when the group is made and compared across ranks.
enum class Kind : uint8_t {
  Text,       // compared as written (lower-cased)
  Bytes,      // a byte count with K/M/G suffixes
  BytesList,  // bytes and key=bytes items (the protocol table's lists, NOTE [protocol table])
  Bool,       // 1/true/yes/on, anything else is off
  Int,
  List,       // comma list of names
};

struct Var {
  const char* name;
  const char* default_value;
  Audience audience;
  Across across;
  Kind kind;
  const char* meaning;
};

const std::vector<Var>& registry();
const Var* find(const std::string& name);  // nullptr if not registered

// Variables no longer read: name and what to do instead. A retired variable
// set in the environment raises when a group is made if `fatal` (it would
// change behaviour silently), else is logged once.
struct Retired {
  const char* name;
  const char* instead;
  bool fatal;
};
const std::vector<Retired>& retired();

// Raw accessors of the environment (for code outside any group). get() throws
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

// `text` of variable `v` as ranks compare it (NOTE [settings across ranks]);
// throws std::invalid_argument naming the variable if it cannot be read as its kind.
std::string normalize(const Var& v, const std::string& text);

// NOTE [group settings]: one group's values of every registered variable.
class Settings {
 public:
  enum class Source : uint8_t { Default, Environment, Options };

  // The environment now, with `overrides` (name -> value, a group's options)
  // taking precedence. Throws std::invalid_argument for an override whose
  // name is not registered (naming a retired one's replacement), and for a
  // fatal retired variable set in the environment; logs the others once per
  // process, as it does TORCH_PURLIN_* names that are not registered.
  explicit Settings(const std::map<std::string, std::string>& overrides = {});

  std::string get(const char* name) const;
  int64_t get_bytes(const char* name) const;
  bool get_bool(const char* name) const;
  int get_int(const char* name) const;
  std::vector<std::string> get_list(const char* name) const;
  Source source(const char* name) const;
  static const char* source_name(Source s);  // "default", "environment", "options"
  const std::map<std::string, std::string>& overrides() const { return overrides_; }

 private:
  size_t index(const char* name) const;  // throws for a name not registered
  std::vector<std::string> values_;      // by registry index
  std::vector<Source> sources_;
  std::map<std::string, std::string> overrides_;
};

}  // namespace purlin::env
