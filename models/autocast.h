// Autocast switched on for one device type while alive, and put back as it
// was on leaving (autocast is thread-local). One mechanism for the --amp
// guard of every strategy (harness/training.h's AutocastGuard) and for a
// recomputed unit's forward, which runs on autograd's thread under the
// state its first forward had (models/recompute.cpp).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>

namespace ddpbench {

class ScopedAutocast {
 public:
  // Autocast to `dtype` on `type`; nothing changes when `dtype` is empty.
  ScopedAutocast(c10::DeviceType type, std::optional<c10::ScalarType> dtype);
  ~ScopedAutocast();
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  c10::DeviceType type_;
  bool active_;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace ddpbench
