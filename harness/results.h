// The results CSV: one fixed column list, the header written once, one row
// appended per run under an exclusive flock (concurrent runs lose no rows and
// never interleave), fields quoted by libcsv when they need it. Rows are read
// back (for the scaling baseline and the report) with the same library.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpbench {

class ResultsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Row = std::map<std::string, std::string>;

// Every column, in file order. Cells not set are written empty ("does not
// apply" or "unknown"), never 0.
const std::vector<std::string>& ResultColumns();

// Appends `row` to `path` (creating it with the header). Throws ResultsError
// when the file cannot be written, when its header is not ResultColumns(), or
// when `row` names a column that does not exist.
void AppendRow(const std::string& path, const Row& row);

// One field, CSV-quoted only when it needs to be (comma, quote, newline, edge
// spaces).
std::string CsvField(const std::string& value);
std::string FormatRow(const std::vector<std::string>& columns, const Row& row);

// All rows of a results file, keyed by header name. Throws ResultsError.
std::vector<Row> ReadRows(const std::string& path);

}  // namespace ddpbench
