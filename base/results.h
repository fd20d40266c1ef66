// The results CSV: one column list, the header written once, one row appended
// per run under an exclusive flock (concurrent runs lose no rows and never
// interleave), fields quoted by libcsv when they need it. A file written by
// another ddpbench version (another set of columns) is migrated in place under
// that lock; a row that cannot be written at all is still saved to a fallback
// file. Every path option is checked before the first step (CheckPaths).
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddpbench {

struct RunConfig;

class ResultsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using Row = std::map<std::string, std::string>;

// Every column, in file order. Cells not set are written empty ("does not
// apply" or "unknown"), never 0.
const std::vector<std::string>& ResultColumns();

// Whether `header` is a ddpbench results header, of this or another version:
// unique non-empty names including the core columns (timestamp, strategy,
// throughput_img_s). Other columns may be unknown to this build.
bool IsResultsHeader(const std::vector<std::string>& header);

// Appends `row` to `path` (creating it with the header). A file whose header
// is another set of ddpbench columns is first rewritten (temporary file in the
// same directory, fsync, rename) with every row kept, the columns in
// ResultColumns() order and columns unknown to this build kept at the end; a
// file holding every current column is appended to in its own order. Throws
// ResultsError when the file cannot be written, is not a ddpbench results CSV,
// or when `row` names a column that does not exist.
void AppendRow(const std::string& path, const Row& row);

// AppendRow, and when that fails the row is not lost: the header and the row
// go to stderr and to a fallback file in $TMPDIR (or /tmp); the ResultsError
// thrown names that file. Returns normally when the row was appended.
void AppendRowOrSave(const std::string& path, const Row& row);

// One field, CSV-quoted only when it needs to be (comma, quote, newline, edge
// spaces).
std::string CsvField(const std::string& value);

// Replaces `path` with `data` so that a reader sees the old file or the new
// one, never a part: a temporary file beside it, fsync, rename, fsync of the
// directory. Throws ResultsError naming the path.
void ReplaceFile(const std::string& path, const std::string& data, unsigned mode = 0644);
// The whole content of `path`; ResultsError naming it when it cannot be read.
std::string ReadWholeFile(const std::string& path);
std::string FormatRow(const std::vector<std::string>& columns, const Row& row);

// All rows of a results file, keyed by header name. Throws ResultsError.
std::vector<Row> ReadRows(const std::string& path);

// Path options, checked before any rank starts and before the first step.
enum class PathKind {
  kAppendResults,  // a results CSV to append to: an existing ddpbench CSV, or creatable
  kReadResults,    // an existing ddpbench results CSV
  kWriteFile,      // a file to create or overwrite
  kWriteDir,       // a directory that exists, or can be made, and is writable
};
struct PathOption {
  std::string flag;  // "--out"
  std::string path;  // "" : not given, not checked
  PathKind kind;
};

// Every path option of `config` (a new option is one line there).
std::vector<PathOption> PathOptions(const RunConfig& config);

// Throws ConfigError (exit 2) naming the flag, the path and what is wrong
// with it, or ResultsError (exit 4) for an --out file that exists but is not
// a ddpbench results CSV. Reads at most the first line of a file.
void CheckPaths(const std::vector<PathOption>& paths);

}  // namespace ddpbench
