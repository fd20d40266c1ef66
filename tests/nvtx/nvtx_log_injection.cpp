// An NVTX injection library: loaded by the NVTX3 headers inside ddpbench when
// NVTX_INJECTION64_PATH names it, it records every domain creation and every
// range push/pop (calling thread, monotonic time in ns) as one line in the
// file named by DDPBENCH_NVTX_LOG. It is how ctest proves the Nsight ranges
// exist without Nsight or a GPU (nvtx_ranges.py), and what
// scripts/nvtx_trace.py turns into a Chrome trace. Each process (rank) writes
// its own file, DDPBENCH_NVTX_LOG.<pid>.
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

namespace {

struct Domain {
  std::string name;
};

std::mutex log_mutex;
FILE* log_file = nullptr;

std::string DomainName(nvtxDomainHandle_t handle) {
  return handle ? reinterpret_cast<Domain*>(handle)->name : std::string("(default)");
}

void Log(const std::string& line) {
  std::lock_guard<std::mutex> lock(log_mutex);
  if (!log_file) return;
  // CLOCK_MONOTONIC nanoseconds: one clock for every rank of the machine.
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count();
  std::fprintf(log_file, "%zu %lld %s\n", std::hash<std::thread::id>{}(std::this_thread::get_id()),
               static_cast<long long>(ns), line.c_str());
  std::fflush(log_file);
}

nvtxDomainHandle_t DomainCreateA(const char* name) {
  auto* domain = new Domain{name ? name : ""};  // lives as long as the process, as NVTX domains do
  Log("domain " + domain->name);
  return reinterpret_cast<nvtxDomainHandle_t>(domain);
}

int DomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr) {
  const bool ascii = attr && attr->messageType == NVTX_MESSAGE_TYPE_ASCII && attr->message.ascii;
  Log("push " + DomainName(domain) + " " + (ascii ? attr->message.ascii : "(non-ascii)"));
  return 0;
}

int DomainRangePop(nvtxDomainHandle_t domain) {
  Log("pop " + DomainName(domain));
  return 0;
}

template <typename Fn>
void Install(NvtxFunctionTable table, unsigned int size, unsigned int id, Fn fn) {
  if (id < size + 1 && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

// Every copy of the NVTX headers linked into the process (ours, LibTorch's)
// initialises separately; they share one log file.
bool OpenLog() {
  std::lock_guard<std::mutex> lock(log_mutex);
  const char* prefix = std::getenv("DDPBENCH_NVTX_LOG");
  if (!log_file && prefix) log_file = std::fopen((std::string(prefix) + "." + std::to_string(getpid())).c_str(), "w");
  return log_file != nullptr;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  if (!OpenLog()) return 0;  // 0: NVTX turns every call into a no-op
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
  Install(table, size, NVTX_CBID_CORE2_DomainCreateA, &DomainCreateA);
  Install(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &DomainRangePushEx);
  Install(table, size, NVTX_CBID_CORE2_DomainRangePop, &DomainRangePop);
  return 1;
}
