// setup_agreement.cc — see setup_agreement.h.
#include "backend/group/setup_agreement.h"

#include <map>
#include <sstream>
#include <vector>

#include "common/hex.h"

namespace purlin::backend {

namespace {

std::string hex(const std::string& s) { return to_hex(s.data(), s.size()); }

// One rank's settings record: its error (hex, "" = none), then per equal
// setting (registry order) normalized value, raw value (both hex) and source.
struct Record {
  std::string error;
  std::vector<std::string> normalized, raw;
  std::vector<int> source;
  bool valid = true;  // false: not a record of this build's registry

  std::string encode() const {
    std::ostringstream os;
    os << "settings-v1\n" << hex(error) << '\n' << normalized.size() << '\n';
    for (size_t i = 0; i < normalized.size(); ++i)
      os << hex(normalized[i]) << '\n' << hex(raw[i]) << '\n' << source[i] << '\n';
    return os.str();
  }
  static Record decode(const std::string& s) {
    Record r;
    std::istringstream is(s);
    std::string tag, err, n_text;
    if (!std::getline(is, tag) || tag != "settings-v1" || !std::getline(is, err) || !std::getline(is, n_text)) {
      r.valid = false;
      return r;
    }
    r.error = from_hex(err);
    const size_t n = std::stoul(n_text);
    for (size_t i = 0; i < n; ++i) {
      std::string a, b, c;
      if (!std::getline(is, a) || !std::getline(is, b) || !std::getline(is, c)) {
        r.valid = false;
        return r;
      }
      r.normalized.push_back(from_hex(a));
      r.raw.push_back(from_hex(b));
      r.source.push_back(std::stoi(c));
    }
    return r;
  }
};

}  // namespace

std::string agree_on_setup(const Rendezvous& rdv, const std::string& key, int rank, int world,
                           const std::string& my_error) {
  const std::vector<std::string> all = all_gather(rdv, key, rank, world, my_error.empty() ? "ok" : "!" + my_error);
  std::string why;
  for (int r = 0; r < world; ++r) {
    const std::string& v = all[r];
    if (v == "ok") continue;
    why += (why.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " could not set up the group: " +
           (v.empty() || v[0] != '!' ? "unexpected setup reply '" + v + "'" : v.substr(1));
  }
  return why;
}

std::string agree_on_settings(const Rendezvous& rdv, const std::string& key, int rank, int world,
                              const GroupContext& ctx, const std::string& my_error) {
  Record mine;
  mine.error = my_error;
  std::vector<const env::Var*> equal;
  for (const env::Var& v : env::registry()) {
    const std::string raw = ctx.settings.get(v.name);
    std::string norm;
    try {
      norm = env::normalize(v, raw);
    } catch (const std::exception& e) {
      mine.error += (mine.error.empty() ? "" : "; ") + std::string(e.what());
      norm = "!" + raw;  // compared as written
    }
    if (v.across != env::Across::Equal) continue;
    equal.push_back(&v);
    mine.normalized.push_back(norm);
    mine.raw.push_back(raw);
    mine.source.push_back(static_cast<int>(ctx.settings.source(v.name)));
  }
  std::vector<Record> all;
  for (const std::string& s : all_gather(rdv, key, rank, world, mine.encode())) all.push_back(Record::decode(s));

  std::string why;
  auto add = [&why](const std::string& line) { why += (why.empty() ? "" : "; ") + line; };
  for (int r = 0; r < world; ++r) {
    if (!all[r].valid || all[r].normalized.size() != equal.size())
      add(ctx.rank_name(r) + " runs another build of torch-purlin (its settings record differs in form)");
    else if (!all[r].error.empty())
      add(ctx.rank_name(r) + " could not set up the group: " + all[r].error);
  }
  if (!why.empty()) return why;
  for (size_t i = 0; i < equal.size(); ++i) {
    std::map<std::string, std::vector<int>> by_value;  // normalized value -> ranks
    for (int r = 0; r < world; ++r) by_value[all[r].normalized[i]].push_back(r);
    if (by_value.size() == 1) continue;
    std::string line = std::string(equal[i]->name) + " must be equal on every rank of the group (the "
                       "\"across ranks\" column of the README's and docs/TUNING.md's tables) but differs:";
    bool first = true;
    for (const auto& [value, ranks] : by_value) {
      const Record& rec = all[ranks[0]];
      line += first ? " " : ", ";
      first = false;
      for (size_t k = 0; k < ranks.size(); ++k) line += (k ? " and " : "") + ctx.rank_name(ranks[k]);
      const auto src = static_cast<env::Settings::Source>(rec.source[i]);
      line += (rec.raw[i].empty() ? std::string(" unset") : " '" + rec.raw[i] + "'") + " (" +
              env::Settings::source_name(src) + ")";
    }
    add(line);
  }
  return why;
}

}  // namespace purlin::backend
