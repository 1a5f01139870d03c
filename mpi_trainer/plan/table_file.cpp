#include "plan/table_file.hpp"

#include <cmath>
#include <sstream>

#include "core/error.hpp"

namespace mt {

std::vector<TableRow> read_table(std::istream& in, const std::string& header) {
  std::vector<TableRow> rows;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    for (char& ch : line)
      if (ch == ',' || ch == '\t' || ch == '\r') ch = ' ';
    std::istringstream fields(line);
    TableRow row{number, line, {}};
    for (std::string f; fields >> f;)
      row.fields.push_back(f);
    if (row.fields.empty() || row.fields[0] == header) continue;  // blank, comment or header
    rows.push_back(std::move(row));
  }
  return rows;
}

double table_number(const std::string& text, const std::string& where, const std::string& what) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw DataError(where + "'" + text + "' is not " + what);
}

}  // namespace mt
