#include "base/crash_point.h"
#include "base/results.h"

#include <csv.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "base/config.h"

namespace ddpbench {

const std::vector<std::string>& ResultColumns() {
  static const std::vector<std::string> kColumns = {
      "timestamp", "git_sha", "host", "run_id", "entry", "strategy", "gpus", "nodes", "world_size", "launcher", "device",
      "device_name", "threads_per_device", "oversubscribed", "model", "norm", "width",
      "small_input", "dataset", "image_size", "per_device_batch", "global_batch", "steps",
      "warmup", "epochs", "amp", "optimizer", "lr", "memory_format", "optimizer_impl", "cpu_malloc", "tf32",
      "cudnn_benchmark", "cuda_graphs", "fuse", "throughput_img_s", "repeats", "throughput_mad_img_s",
      "throughput_min_img_s", "throughput_max_img_s",
      "throughput_per_rank_img_s", "step_ms_p50", "step_ms_p90", "model_tflops_per_img", "hardware_tflops_per_img", "mfu", "data_ms", "data_wait_ms", "data_bound_frac", "data_bound_stage", "data_stage_ms", "loader_img_s", "data_workers", "bad_images_skipped", "forward_ms",
      "backward_ms", "optimizer_ms", "communication_ms", "peak_mem_mb", "mem_per_device_mb",
      "mem_reserved_per_device_mb", "peak_rss_mb", "recompute", "optimizer_state_mb", "param_mb", "grad_mb", "zero_expected_mb", "memory_expected_mb", "memory_vs_expected", "accuracy", "eval_images",
      "final_loss", "test_loss", "val_fraction", "val_accuracy", "best_val_loss", "epochs_completed", "steps_per_epoch", "mean_epoch_s",
      "time_budget_s", "target_accuracy", "time_to_target_s", "steps_to_target", "stop_reason", "steps_done",
      "train_time_s", "resumed_from_step", "restarts", "worlds", "steps_lost", "batch_adjusted", "epoch_csv", "snapshot", "scaling_efficiency", "baseline_throughput_img_s", "expected_img_s", "vs_expected", "expected_term", "expected_from", "parity_max_abs_diff",
      "parity_steps", "parity_model", "parity_ok", "units", "split", "split_setup", "stage_time_ms", "chunks", "schedule",
      "virtual_stages", "bubble_measured", "bubble_theory", "bubble_simulated", "stage_busy_ms", "stage_busy_step_ratio", "chunk_fbw_ms", "w_fill_ms", "activation_peak_mb",
      "bucket_cap_mb", "grad_accum",
      "compression", "allreduce_hidden_frac", "zero_reduce", "units_gathered_max", "mesh", "comm_backend", "store_bind", "nccl_socket_ifname", "trace", "profile", "inject", "straggler_rank", "straggler_ms", "straggler_phase", "straggler_noise_ms", "rank_compute_ms", "torch_version", "cuda_version",
      "nccl_version", "driver_version", "cpu_model", "cpu_isa", "machine_id", "command"};
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

const char* const kCoreColumns[] = {"timestamp", "strategy", "throughput_img_s"};

std::string HeaderLine(const std::vector<std::string>& columns) {
  Row names;
  for (const auto& c : columns) names[c] = c;
  return FormatRow(columns, names);
}

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

// Every record of `text` (libcsv, strict). Throws ResultsError naming `path`.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text, const std::string& path) {
  csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) throw ResultsError("libcsv: init failed");
  ParseState state;
  size_t parsed = csv_parse(&parser, text.data(), text.size(), OnField, OnRow, &state);
  bool ok = parsed == text.size() && csv_fini(&parser, OnField, OnRow, &state) == 0;
  std::string err = ok ? "" : csv_strerror(csv_error(&parser));
  csv_free(&parser);
  if (!ok) throw ResultsError(fmt::format("{}: not valid CSV: {}", path, err));
  return std::move(state.rows);
}

// Records after the header, keyed by its names.
std::vector<Row> RowsOf(const std::vector<std::vector<std::string>>& records, const std::string& path) {
  std::vector<Row> rows;
  for (size_t r = 1; r < records.size(); ++r) {
    const auto& cells = records[r];
    if (cells.size() != records[0].size())
      throw ResultsError(fmt::format("{}: row {} has {} fields, the header has {}", path, r + 1,
                                     cells.size(), records[0].size()));
    Row row;
    for (size_t i = 0; i < cells.size(); ++i) row[records[0][i]] = cells[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

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

// fsync, which a device or pipe does not support (EINVAL: nothing to sync).
void Sync(int fd, const std::string& what) {
  if (::fsync(fd) != 0 && errno != EINVAL)
    throw ResultsError(fmt::format("{}: fsync failed: {}", what, std::strerror(errno)));
}

// The whole file behind `fd` (from offset 0).
std::string ReadAll(int fd, const std::string& path) {
  std::string text;
  char buf[1 << 16];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ResultsError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
}

// The first line of a file (its header), read without loading the rest.
std::string FirstLine(int fd, const std::string& path) {
  std::string line;
  char buf[4096];
  for (off_t off = 0; line.find('\n') == std::string::npos && line.size() < (1 << 20);) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ResultsError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
    if (n == 0) break;
    line.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return line.substr(0, line.find('\n') + (line.find('\n') == std::string::npos ? 0 : 1));
}

std::vector<std::string> ParseHeader(const std::string& line, const std::string& path) {
  auto records = ParseCsv(line, path);
  return records.empty() ? std::vector<std::string>{} : records.front();
}

std::string NotResultsCsv(const std::string& what, const std::vector<std::string>& header) {
  std::string shown;
  for (size_t i = 0; i < header.size() && i < 4; ++i) shown += (i ? "," : "") + header[i];
  if (header.size() > 4) shown += ",...";
  return fmt::format("{}: not a ddpbench results CSV (its header '{}' lacks timestamp, strategy or "
                     "throughput_img_s); give a new file or a ddpbench results file",
                     what, shown);
}

struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);  // closing also releases the flock
  }
};

// Opens `path` for writing and takes its exclusive flock. A writer that
// migrated the file meanwhile replaced it (rename), so the lock is only
// valid while the path still names the locked inode: otherwise retry.
int OpenLocked(const std::string& path) {
  for (;;) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
      throw ResultsError(fmt::format("--out={}: cannot open for appending: {}", path, std::strerror(errno)));
    FdGuard guard{fd};
    while (::flock(fd, LOCK_EX) != 0)
      if (errno != EINTR)
        throw ResultsError(fmt::format("--out={}: cannot lock: {}", path, std::strerror(errno)));
    struct stat held {}, named {};
    if (::fstat(fd, &held) != 0)
      throw ResultsError(fmt::format("--out={}: cannot stat: {}", path, std::strerror(errno)));
    if (!S_ISREG(held.st_mode) ||
        (::stat(path.c_str(), &named) == 0 && named.st_ino == held.st_ino && named.st_dev == held.st_dev)) {
      guard.fd = -1;
      return fd;
    }
  }
}

// A writer that died mid-row leaves a file not ending with a newline.
bool EndsWithNewline(int fd, off_t size) {
  char last = '\n';
  return size == 0 || ::pread(fd, &last, 1, size - 1) != 1 || last == '\n';
}
std::string TornRow(const std::string& what) {
  return what + ": the file does not end with a newline (a torn row?); repair it or append to a new file";
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Rewrites the locked file at `path` (header `header`, content `text`) with
// the current columns first, then appends `row`: a temporary file in the same
// directory, fsync, rename over the path, fsync of the directory.
void MigrateAndAppend(int fd, const std::string& path, const std::string& text, const Row& row) {
  auto records = ParseCsv(text, path);
  std::vector<Row> rows = RowsOf(records, path);
  std::vector<std::string> columns = ResultColumns();
  for (const auto& c : records.front())
    if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(c);
  std::string out = HeaderLine(columns);
  for (const auto& r : rows) out += FormatRow(columns, r);
  out += FormatRow(columns, row);

  struct stat st {};
  const mode_t mode = ::fstat(fd, &st) == 0 ? (st.st_mode & 07777) : 0644;
  try {
    ReplaceFile(path, out, mode);
  } catch (const ResultsError& e) {
    throw ResultsError(fmt::format("--out={}: its header is another ddpbench version's and migrating it "
                                   "failed: {}", path, e.what()));
  }
}

}  // namespace

std::string ReadWholeFile(const std::string& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) throw ResultsError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  return ReadAll(guard.fd, path);
}

void ReplaceFile(const std::string& path, const std::string& data, unsigned mode) {
  std::string tmp = path + ".tmp-XXXXXX";
  int tfd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (tfd < 0)
    throw ResultsError(fmt::format("{}: cannot create a temporary file beside it: {}", path, std::strerror(errno)));
  FdGuard guard{tfd};
  try {
    ::fchmod(tfd, mode);
    const size_t half = data.size() / 2;  // two writes, so a crash point can fall between them
    WriteAll(tfd, data.substr(0, half), tmp);
    CrashPoint("replace: half written");
    WriteAll(tfd, data.substr(half), tmp);
    Sync(tfd, tmp);
    CrashPoint("replace: written, before the rename");
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw ResultsError(fmt::format("{}: cannot rename {} over it: {}", path, tmp, std::strerror(errno)));
    CrashPoint("replace: renamed");
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  FdGuard dir{::open(DirectoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd >= 0) ::fsync(dir.fd);
}

bool IsResultsHeader(const std::vector<std::string>& header) {
  std::set<std::string> names(header.begin(), header.end());
  if (names.size() != header.size() || names.count("")) return false;
  for (const char* c : kCoreColumns)
    if (!names.count(c)) return false;
  return true;
}

namespace {

// Appends `row` to the locked, non-empty results file `path`: in the file's
// own column order when it has every current column, else migrating it.
void AppendToExisting(int fd, const std::string& path, off_t size, const Row& row) {
  auto header = ParseHeader(FirstLine(fd, path), path);
  if (!IsResultsHeader(header)) throw ResultsError(NotResultsCsv("--out=" + path, header));
  if (!EndsWithNewline(fd, size)) throw ResultsError(TornRow("--out=" + path));
  std::set<std::string> present(header.begin(), header.end());
  const auto& columns = ResultColumns();
  if (!std::all_of(columns.begin(), columns.end(), [&](const auto& c) { return present.count(c) > 0; }))
    return MigrateAndAppend(fd, path, ReadAll(fd, path), row);
  WriteAll(fd, FormatRow(header, row), "--out=" + path);
  Sync(fd, "--out=" + path);
}

}  // namespace

void AppendRow(const std::string& path, const Row& row) {
  const auto& columns = ResultColumns();
  std::set<std::string> known(columns.begin(), columns.end());
  for (const auto& [key, value] : row)
    if (!known.count(key)) throw ResultsError(fmt::format("internal: unknown result column '{}'", key));

  FdGuard guard{OpenLocked(path)};
  struct stat st {};
  ::fstat(guard.fd, &st);
  off_t size = S_ISREG(st.st_mode) ? ::lseek(guard.fd, 0, SEEK_END) : 0;
  if (size > 0) return AppendToExisting(guard.fd, path, size, row);
  // A new file, or a device or pipe (/dev/stdout).
  WriteAll(guard.fd, HeaderLine(columns) + FormatRow(columns, row), "--out=" + path);
  Sync(guard.fd, "--out=" + path);
}

void AppendRowOrSave(const std::string& path, const Row& row) {
  try {
    AppendRow(path, row);
    return;
  } catch (const ResultsError& e) {
    const auto& columns = ResultColumns();
    const std::string text = HeaderLine(columns) + FormatRow(columns, row);
    std::fprintf(stderr, "ddpbench: the row that could not be appended to %s:\n%s", path.c_str(), text.c_str());
    const char* tmpdir = std::getenv("TMPDIR");
    std::string saved = fmt::format("{}/ddpbench-row-XXXXXX.csv", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = ::mkostemps(saved.data(), 4, O_CLOEXEC);
    std::string where;
    try {
      if (fd < 0) throw ResultsError(std::strerror(errno));
      FdGuard guard{fd};
      WriteAll(fd, text, saved);
      Sync(fd, saved);
      where = "the row is saved in " + saved;
    } catch (const ResultsError& save) {
      where = fmt::format("saving it to {} failed too ({}); it is printed above", saved, save.what());
    }
    throw ResultsError(fmt::format("{}; {}", e.what(), where));
  }
}

std::vector<Row> ReadRows(const std::string& path) {
  FdGuard guard{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) throw ResultsError(fmt::format("{}: cannot open results file: {}", path, std::strerror(errno)));
  return RowsOf(ParseCsv(ReadAll(guard.fd, path), path), path);
}

// ---- Path options, checked before the first step.

std::vector<PathOption> PathOptions(const RunConfig& c) {
  return {
      {"--out", c.out, PathKind::kAppendResults},
      {"--baseline", c.baseline, PathKind::kReadResults},
      {"--epoch-csv", c.epoch_csv, PathKind::kWriteFile},
      {"--snapshot-dir", c.snapshot_dir, PathKind::kWriteDir},
      {"--trace", c.trace, PathKind::kWriteFile},
      {"--export", c.export_file, PathKind::kWriteFile},
      {"--profile", c.profile, PathKind::kWriteFile},
      {"--memory-snapshot", c.memory_snapshot, PathKind::kWriteFile},
  };
}

namespace {

[[noreturn]] void BadPath(const PathOption& o, const std::string& what) {
  throw ConfigError(fmt::format("{}={}: {}", o.flag, o.path, what));
}

// The directory that will hold `o.path` exists and this process may create
// files in it.
void CheckParentWritable(const PathOption& o, const std::string& why = "") {
  const std::string dir = DirectoryOf(o.path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    BadPath(o, fmt::format("directory {} {}", dir, errno == ENOENT ? "does not exist" : std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) BadPath(o, fmt::format("{} is not a directory", dir));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    BadPath(o, fmt::format("directory {} is not writable{}: {}", dir, why, std::strerror(errno)));
}

// The header of an existing regular file ({} when it is empty).
std::vector<std::string> HeaderOf(const PathOption& o) {
  FdGuard guard{::open(o.path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd < 0) BadPath(o, fmt::format("cannot be read: {}", std::strerror(errno)));
  try {
    return ParseHeader(FirstLine(guard.fd, o.path), o.path);
  } catch (const ResultsError&) {
    return {"(not CSV)"};
  }
}

void CheckAppendResults(const PathOption& o, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return;  // a device or pipe gets the header and the row
  if (::access(o.path.c_str(), R_OK | W_OK) != 0)
    BadPath(o, fmt::format("cannot be read and appended to: {}", std::strerror(errno)));
  auto header = HeaderOf(o);
  if (header.empty()) return;
  if (!IsResultsHeader(header)) throw ResultsError(NotResultsCsv(o.flag + "=" + o.path, header));
  FdGuard guard{::open(o.path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (guard.fd >= 0 && !EndsWithNewline(guard.fd, st.st_size)) throw ResultsError(TornRow(o.flag + "=" + o.path));
  std::set<std::string> present(header.begin(), header.end());
  for (const auto& c : ResultColumns())
    if (!present.count(c))  // another version's file: it is rewritten beside itself
      return CheckParentWritable(o, " (the file's columns are another ddpbench version's and it is migrated "
                                    "through a temporary file there)");
}

void CheckExisting(const PathOption& o, const struct stat& st) {
  switch (o.kind) {
    case PathKind::kAppendResults:
      if (S_ISDIR(st.st_mode)) BadPath(o, "is a directory; give the CSV file to append to");
      return CheckAppendResults(o, st);
    case PathKind::kReadResults: {
      if (!S_ISREG(st.st_mode)) BadPath(o, "is not a regular file; give a ddpbench results CSV");
      auto header = HeaderOf(o);
      if (header.empty()) BadPath(o, "is empty; give a ddpbench results CSV");
      if (!IsResultsHeader(header)) throw ConfigError(NotResultsCsv(o.flag + "=" + o.path, header));
      return;
    }
    case PathKind::kWriteFile:
      if (S_ISDIR(st.st_mode)) BadPath(o, "is a directory; give a file name");
      if (::access(o.path.c_str(), W_OK) != 0) BadPath(o, fmt::format("is not writable: {}", std::strerror(errno)));
      return;
    case PathKind::kWriteDir:
      if (!S_ISDIR(st.st_mode)) BadPath(o, "exists and is not a directory");
      if (::access(o.path.c_str(), W_OK | X_OK) != 0)
        BadPath(o, fmt::format("directory is not writable: {}", std::strerror(errno)));
      return;
  }
}

}  // namespace

void CheckPaths(const std::vector<PathOption>& paths) {
  for (const auto& o : paths) {
    if (o.path.empty()) continue;
    struct stat st {};
    if (::stat(o.path.c_str(), &st) == 0) {
      CheckExisting(o, st);
    } else if (errno != ENOENT) {
      BadPath(o, std::strerror(errno));
    } else if (o.kind == PathKind::kReadResults) {
      BadPath(o, "does not exist; give a ddpbench results CSV holding the single-device row");
    } else {
      CheckParentWritable(o);
    }
  }
}

}  // namespace ddpbench
