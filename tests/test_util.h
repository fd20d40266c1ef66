// Helpers shared by the unit tests: temporary directories and running the
// real ddpbench binary.
#pragma once
#include <functional>
#include <string>

namespace ddpbench::testing {

// A fresh directory under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;   // exit status, or 128 + signal
  std::string output;   // stdout and stderr together
};
// Runs `ddpbench <args>` through /bin/sh (args are pasted as they are).
CommandResult RunDdpbench(const std::string& args, int timeout_s = 300);
CommandResult RunShell(const std::string& command);

std::string ReadFile(const std::string& path);
// The message of the ConfigError `fn` throws ("" when none).
std::string ConfigErrorOf(const std::function<void()>& fn);
void WriteFile(const std::string& path, const std::string& content);

}  // namespace ddpbench::testing
