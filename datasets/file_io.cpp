// Reading whole data files through zlib. gzread inflates gzip and passes plain
// files through unchanged, so one code path serves `x.gz` and `x`; the data
// sets involved (at most a few hundred MB) are read in one go because every
// reader needs random access to all of it anyway.
#include "datasets/internal.h"

#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ddpbench::detail {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Closes the gzFile on every path out of ReadFileBytes.
struct GzCloser {
  gzFile f;
  ~GzCloser() {
    if (f) gzclose_r(f);
  }
};

}  // namespace

std::string ReadFileBytes(const std::string& path) {
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) {
    throw DataError(path + ": cannot open: " +
                    (errno ? std::strerror(errno) : std::string("out of memory")));
  }
  GzCloser closer{f};
  // The file's size sizes the buffers: a plain file (an image of 100 KB) is
  // then read in one call into a buffer of its size, never one of kChunk
  // (whose zero-filling cost more than the read).
  constexpr unsigned kChunk = 4u << 20;
  struct stat st {};
  const auto size_hint = ::stat(path.c_str(), &st) == 0 ? static_cast<unsigned>(std::min<off_t>(st.st_size, kChunk)) : kChunk;
  gzbuffer(f, std::clamp(size_hint, 8u << 10, 1u << 20));

  std::string data;
  for (unsigned want = size_hint + 1;; want = kChunk) {
    const size_t old = data.size();
    data.resize(old + want);
    const int n = gzread(f, data.data() + old, want);
    if (n < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw DataError(path + ": corrupt gzip data: " + (msg ? msg : "read error"));
    }
    data.resize(old + static_cast<size_t>(n));
    if (old == 0 && n > 0 && EndsWith(path, ".gz") && gzdirect(f)) {
      throw DataError(path + ": not a gzip file (the name ends in .gz but the gzip header is missing)");
    }
    if (static_cast<unsigned>(n) < want) break;  // gzread returns less than asked only at the end
  }
  // A stream cut short ends reads without a -1 from gzread: zlib reports it
  // through gzerror (Z_BUF_ERROR, "unexpected end of file") or gzclose_r.
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    throw DataError(path + ": corrupt gzip data: " + (msg ? msg : "read error"));
  }
  closer.f = nullptr;
  const int rc = gzclose_r(f);
  if (rc == Z_BUF_ERROR) throw DataError(path + ": corrupt gzip data: truncated gzip stream");
  if (rc != Z_OK) throw DataError(path + ": error closing file (zlib code " + std::to_string(rc) + ")");
  if (data.empty() && EndsWith(path, ".gz")) {
    // An empty .gz file is not a gzip stream at all.
    throw DataError(path + ": not a gzip file (empty)");
  }
  return data;
}

}  // namespace ddpbench::detail
