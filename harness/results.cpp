#include "harness/results.h"

#include <csv.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace ddpbench {

const std::vector<std::string>& ResultColumns() {
  static const std::vector<std::string> kColumns = {
      "timestamp", "git_sha", "host", "strategy", "gpus", "world_size", "launcher", "device",
      "device_name", "threads_per_device", "oversubscribed", "model", "norm", "width",
      "small_input", "dataset", "image_size", "per_device_batch", "global_batch", "steps",
      "warmup", "epochs", "amp", "optimizer", "lr", "throughput_img_s",
      "throughput_per_rank_img_s", "step_ms_p50", "step_ms_p90", "data_ms", "forward_ms",
      "backward_ms", "optimizer_ms", "communication_ms", "peak_mem_mb", "mem_per_device_mb",
      "mem_reserved_per_device_mb", "peak_rss_mb", "optimizer_state_mb", "param_mb", "grad_mb", "zero_expected_mb", "accuracy",
      "final_loss", "scaling_efficiency", "baseline_throughput_img_s", "parity_max_abs_diff",
      "parity_steps", "parity_model", "parity_ok", "split", "chunks", "schedule",
      "bubble_measured", "bubble_theory", "stage_busy_ms", "bucket_cap_mb", "grad_accum",
      "compression", "allreduce_hidden_frac", "zero_reduce", "units_gathered_max", "torch_version", "cuda_version",
      "nccl_version", "cpu_model", "command"};
  return kColumns;
}

std::string CsvField(const std::string& value) {
  bool needs = value.find_first_of(",\"\r\n") != std::string::npos ||
               (!value.empty() && (value.front() == ' ' || value.back() == ' '));
  if (!needs) return value;
  std::string out(csv_write(nullptr, 0, value.data(), value.size()), '\0');
  csv_write(out.data(), out.size(), value.data(), value.size());
  return out;
}

std::string FormatRow(const std::vector<std::string>& columns, const Row& row) {
  std::string line;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) line += ',';
    auto it = row.find(columns[i]);
    if (it != row.end()) line += CsvField(it->second);
  }
  return line + "\n";
}

namespace {

void WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ResultsError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
}

struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);  // closing also releases the flock
  }
};

}  // namespace

void AppendRow(const std::string& path, const Row& row) {
  const auto& columns = ResultColumns();
  std::set<std::string> known(columns.begin(), columns.end());
  for (const auto& [key, value] : row)
    if (!known.count(key)) throw ResultsError(fmt::format("internal: unknown result column '{}'", key));
  const std::string header = FormatRow(columns, [&] {
    Row h;
    for (const auto& c : columns) h[c] = c;
    return h;
  }());
  const std::string line = FormatRow(columns, row);

  FdGuard guard{::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644)};
  if (guard.fd < 0)
    throw ResultsError(fmt::format("--out={}: cannot open for appending: {}", path, std::strerror(errno)));
  while (::flock(guard.fd, LOCK_EX) != 0) {
    if (errno != EINTR)
      throw ResultsError(fmt::format("--out={}: cannot lock: {}", path, std::strerror(errno)));
  }
  off_t size = ::lseek(guard.fd, 0, SEEK_END);
  if (size == 0) {
    WriteAll(guard.fd, header + line, path);
  } else {
    std::string first(header.size(), '\0');
    ssize_t n = ::pread(guard.fd, first.data(), first.size(), 0);
    if (n != static_cast<ssize_t>(header.size()) || first != header)
      throw ResultsError(fmt::format(
          "--out={}: the file's header is not this version's result header (a different tool or "
          "ddpbench version wrote it); append to a new file instead",
          path));
    char last = '\n';
    if (::pread(guard.fd, &last, 1, size - 1) == 1 && last != '\n')
      throw ResultsError(fmt::format("--out={}: the file does not end with a newline (a torn row?); "
                                     "repair it or append to a new file", path));
    WriteAll(guard.fd, line, path);
  }
  if (::fsync(guard.fd) != 0 && errno != EINVAL)
    throw ResultsError(fmt::format("--out={}: fsync failed: {}", path, std::strerror(errno)));
}

namespace {
struct ParseState {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> current;
};
void OnField(void* s, size_t len, void* data) {
  static_cast<ParseState*>(data)->current.emplace_back(static_cast<const char*>(s), len);
}
void OnRow(int, void* data) {
  auto* st = static_cast<ParseState*>(data);
  st->rows.push_back(std::move(st->current));
  st->current.clear();
}
}  // namespace

std::vector<Row> ReadRows(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ResultsError(fmt::format("{}: cannot open results file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0)
    throw ResultsError("libcsv: init failed");
  ParseState state;
  size_t parsed = csv_parse(&parser, text.data(), text.size(), OnField, OnRow, &state);
  bool ok = parsed == text.size() && csv_fini(&parser, OnField, OnRow, &state) == 0;
  std::string err = ok ? "" : csv_strerror(csv_error(&parser));
  csv_free(&parser);
  if (!ok) throw ResultsError(fmt::format("{}: not valid CSV: {}", path, err));
  std::vector<Row> rows;
  if (state.rows.empty()) return rows;
  const auto& header = state.rows.front();
  for (size_t r = 1; r < state.rows.size(); ++r) {
    const auto& cells = state.rows[r];
    if (cells.size() != header.size())
      throw ResultsError(fmt::format("{}: row {} has {} fields, the header has {}", path, r + 1,
                                     cells.size(), header.size()));
    Row row;
    for (size_t i = 0; i < header.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace ddpbench
