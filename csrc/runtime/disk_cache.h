// The persistent compilation cache: serialized PJRT executables on disk, keyed by a SHA-256 of
// everything that determines the compiled code (StableHLO text, compile options, plugin platform
// and version, torchtpu's version). Eager op programs and compiled graphs share it, so a second
// run of the same workload compiles nothing.
//
// Torch-free (std + pjrt.h only): the caller (compile.cpp) owns policy and metrics; this file
// owns hashing, the entry format, atomic writes and the size bound.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "pjrt/pjrt.h"

namespace torchtpu::runtime {

// The one place torchtpu's version enters cache keys (pyproject.toml and torchtpu/__init__.py
// carry the same number for packaging).
extern const char* const kTorchtpuVersion;

// Incremental SHA-256 (FIPS 180-4).
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& s) { update(s.data(), s.size()); }
  // The 32-byte digest; the object must not be updated afterwards.
  std::string digest();

 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256(const std::string& data);
std::string to_hex(const std::string& bytes);

// The host's vector instruction sets ("x86_64 sse4.2 avx avx2 ..."; elsewhere /proc/cpuinfo's
// feature line): part of an XLA:CPU executable's key, since XLA:CPU generates code for them.
std::string host_isa();

// Everything about the plugin and device that decides whether an executable compiled by it can
// be reloaded: platform name and version, plugin attributes (xla_version, stablehlo versions),
// PJRT API version, device kind, and on XLA:CPU the host's instruction sets.
std::string platform_fingerprint(const pjrt::Client& client);

// Hex SHA-256 over length-prefixed fields, so no two different inputs share their bytes.
std::string cache_key(const std::string& fingerprint, const std::string& compile_options,
                      const std::string& mlir);

class DiskCache {
 public:
  // From the environment: TORCHTPU_CACHE=0 turns it off, TORCHTPU_CACHE_DIR moves it from
  // $XDG_CACHE_HOME/torchtpu (~/.cache/torchtpu), TORCHTPU_CACHE_MAX_BYTES bounds it (default
  // 2 GiB; K/M/G suffixes accepted).
  static DiskCache from_environment();
  DiskCache(std::string dir, uint64_t max_bytes, bool enabled);

  enum class Load { kMiss, kHit, kCorrupt };
  // kHit fills *payload and marks the entry recently used; kCorrupt means the file was truncated,
  // garbled, of another format version or for another key, and has been removed.
  Load load(const std::string& key, std::string* payload);

  struct StoreResult {
    bool written = false;
    int64_t evicted = 0;
    std::string error;  // why the entry was not written, when it was not
  };
  // Writes atomically (temporary file, then rename), then evicts least-recently-used entries
  // if the directory exceeds the bound. Never evicts the entry just written.
  StoreResult store(const std::string& key, const std::string& payload);

  // Removes the entry of `key` (an intact entry the platform refused), if any.
  void remove(const std::string& key);

  bool enabled() const;
  void disable();
  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }
  std::string entry_path(const std::string& key) const;

 private:
  int64_t evict_locked(const std::string& keep);

  std::string dir_;
  uint64_t max_bytes_;
  mutable std::mutex mutex_;
  bool enabled_;
  bool dir_ready_ = false;
  bool size_known_ = false;
  uint64_t approx_bytes_ = 0;  // this process's estimate of the directory size
};

}  // namespace torchtpu::runtime
