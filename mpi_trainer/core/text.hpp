// Small text helpers for the data files and flag values we parse by hand.
#pragma once

#include <cstdlib>
#include <sstream>
#include <string>

namespace mt {

// `s` without leading and trailing blanks (spaces, tabs, carriage returns).
inline std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// True when the whole of `s` is a number, stored in `v`.
inline bool to_double(const std::string& s, double& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// Calls fn(line, where) for each line of `text` that is neither blank nor a '#' comment, trimmed;
// `where` is "SOURCE:LINE: ", to begin an error message with.
template <class Fn>
void for_each_data_line(const std::string& text, const std::string& source, Fn&& fn) {
  std::stringstream ss(text);
  int line_no = 0;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    fn(line, source + ":" + std::to_string(line_no) + ": ");
  }
}

}  // namespace mt
