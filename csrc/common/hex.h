// hex.h — bytes <-> lowercase hex text, for handles and probes exchanged
// through the c10d Store as strings (setup code, never on a hot path).
#pragma once

#include <cstddef>
#include <string>

namespace purlin {

inline std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char*>(data)[i];
    s.push_back(digits[c >> 4]);
    s.push_back(digits[c & 15]);
  }
  return s;
}

inline std::string from_hex(const std::string& s) {
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) out.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace purlin
