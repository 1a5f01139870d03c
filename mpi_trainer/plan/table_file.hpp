// Small text tables users give on the command line (--prices, --emulate-device FILE): one entry
// per line, fields separated by spaces, tabs or commas, `#` starting a comment, a header line
// (first field `header`) skipped.
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace mt {

struct TableRow {
  int line = 0;                     // 1-based line number
  std::string text;                 // the line without its comment
  std::vector<std::string> fields;  // at least one
};

std::vector<TableRow> read_table(std::istream& in, const std::string& header);

// `text` as a finite number >= 0, else DataError "<where>'<text>' is not <what>".
double table_number(const std::string& text, const std::string& where, const std::string& what);

}  // namespace mt
