// Shared memory between a worker and a parameter-server shard on the same node: the push's
// gradients and the reply's parameters live in one POSIX shared-memory segment per (worker,
// shard), so the messages carry only their 144-byte headers and the shard updates straight from
// the worker's gradients into the worker's parameters (no MPI copy of either). The worker
// creates the segment and offers its name in its join; a shard on the same host (the name carries
// the maker's hostname) that can map it accepts, anything else keeps the plain messages. The name is unlinked as soon as both have it
// mapped, so nothing is left in /dev/shm when either side dies later.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace mt {

class ShmSegment {
  struct Private {};

 public:
  // A new segment of `bytes`, zeroed. Throws LibraryError on failure.
  static std::shared_ptr<ShmSegment> create(std::size_t bytes);
  // Maps the segment `name` when this host made it, it exists here and has exactly `bytes`; null
  // otherwise (another host, or a name that is not ours) with `why` set.
  static std::shared_ptr<ShmSegment> open(const std::string& name, std::size_t bytes, std::string* why);
  ShmSegment(Private, std::string name, void* base, std::size_t bytes)
      : name_(std::move(name)), base_(base), bytes_(bytes) {}
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  const std::string& name() const { return name_; }
  float* floats() const { return static_cast<float*>(base_); }
  std::size_t bytes() const { return bytes_; }
  // Removes the name (the mapping stays); idempotent.
  void unlink();

 private:
  std::string name_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool linked_ = true;
};

// The name of a segment created by this process and not yet unlinked by it, for exits that skip
// destructors (main's std::_Exit after a takeover): unlink_pending_segments() removes them.
void unlink_pending_segments() noexcept;

// Unlinks this host's segment names (/dev/shm/mt-ps-<host>-<pid>-...) whose creating process no
// longer exists; returns how many. A process whose pid was reused by a live one is left alone.
// ShmSegment::create calls it once per process.
int unlink_stale_segments();

// false when MT_PS_SHM=0: workers then offer no segment and shards accept none (plain messages,
// for comparisons).
bool shm_transport_enabled();

}  // namespace mt
