#include "runtime/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "config/config.h"

namespace torchtpu::runtime {

const char* const kTorchtpuVersion = "0.1.0";

namespace {

// ---- entry format ------------------------------------------------------------------------
// magic[8] | format version u32 | key length u32 | key | payload length u64 |
// SHA-256(payload)[32] | payload. Integers little-endian. Every field is checked on load, so a
// truncated file (length), garbled bytes (checksum), an older/newer layout (version) and a file
// that is not the entry for this key (key echo) are all told apart from a good entry.
constexpr char kMagic[8] = {'T', 'T', 'P', 'U', 'X', 'E', 'C', '\x1a'};
// Bump when the layout or the meaning of the payload changes.
constexpr uint32_t kFormatVersion = 1;
constexpr const char* kEntrySuffix = ".entry";
// A temporary file this old belongs to a process that died mid-write.
constexpr int64_t kStaleTmpSeconds = 3600;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string header_for(const std::string& key, const std::string& payload) {
  std::string h(kMagic, sizeof(kMagic));
  put_u32(h, kFormatVersion);
  put_u32(h, static_cast<uint32_t>(key.size()));
  h += key;
  put_u64(h, payload.size());
  h += sha256(payload);
  return h;
}

// Returns true iff `data` is a complete, intact entry for `key`; then *payload is its payload.
bool parse_entry(const std::string& data, const std::string& key, std::string* payload) {
  const size_t fixed = sizeof(kMagic) + 4 + 4;
  if (data.size() < fixed || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) return false;
  if (get_le(data.data() + 8, 4) != kFormatVersion) return false;
  uint64_t key_size = get_le(data.data() + 12, 4);
  if (key_size != key.size() || data.size() < fixed + key_size + 8 + 32) return false;
  if (data.compare(fixed, key_size, key) != 0) return false;
  size_t at = fixed + key_size;
  uint64_t payload_size = get_le(data.data() + at, 8);
  at += 8;
  std::string checksum = data.substr(at, 32);
  at += 32;
  // Exact size: a truncated file is short, a file with trailing garbage is long.
  if (data.size() - at != payload_size) return false;
  *payload = data.substr(at);
  if (sha256(*payload) != checksum) return false;
  return true;
}

// ---- small POSIX helpers ----------------------------------------------------------------
bool read_all(int fd, std::string* out) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  out->resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out->size()) {
    ssize_t n = ::read(fd, &(*out)[done], out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;  // shrank under us (it cannot with rename-only writers, but be safe)
    done += static_cast<size_t>(n);
  }
  out->resize(done);
  return true;
}

bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool make_dirs(const std::string& path) {
  if (path.empty()) return false;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    // A file where the folder should be: say so ("Not a directory"), not a stale errno.
    if (!S_ISDIR(st.st_mode)) errno = ENOTDIR;
    return S_ISDIR(st.st_mode);
  }
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0 && !make_dirs(path.substr(0, slash))) return false;
  return mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A name unique across processes (pid) and threads and pid reuse (counter + random seed).
std::string unique_suffix() {
  static const uint64_t seed = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(time(nullptr));
  }();
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(
      buf, sizeof(buf), "%ld.%016llx", static_cast<long>(getpid()),
      static_cast<unsigned long long>(seed + counter.fetch_add(1) * 0x9e3779b97f4a7c15ull));
  return buf;
}

constexpr uint64_t kDefaultMaxBytes = 2ull << 30;

// "1048576", "512M", "2G", "2GiB", "64kb": binary multiples.
bool parse_bytes(const std::string& text, uint64_t* out) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0) return false;
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (!unit.empty() && std::string("KMGT").find(unit[0]) != std::string::npos) {
    shift = 10 * (1 + static_cast<int>(std::string("KMGT").find(unit[0])));
    unit = unit.substr(1);
  }
  if (!(unit.empty() || unit == "B" || unit == "IB")) return false;
  if (shift > 0 && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

std::string attribute_text(const pjrt::Attribute& a) {
  std::ostringstream s;
  if (auto* str = std::get_if<std::string>(&a)) {
    s << "s:" << *str;
  } else if (auto* i = std::get_if<int64_t>(&a)) {
    s << "i:" << *i;
  } else if (auto* v = std::get_if<std::vector<int64_t>>(&a)) {
    s << "v:";
    for (int64_t x : *v) s << x << ",";
  } else if (auto* b = std::get_if<bool>(&a)) {
    s << "b:" << (*b ? 1 : 0);
  } else if (auto* f = std::get_if<float>(&a)) {
    s << "f:" << *f;
  }
  return s.str();
}

void put_field(std::string& out, const std::string& field) {
  put_u64(out, field.size());
  out += field;
}

}  // namespace

// ---- SHA-256 ------------------------------------------------------------------------------
namespace {
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
         0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::block(const unsigned char* p) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t{p[4 * t]} << 24) | (uint32_t{p[4 * t + 1]} << 16) |
           (uint32_t{p[4 * t + 2]} << 8) | uint32_t{p[4 * t + 3]};
  }
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t t1 =
        h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += b;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_bytes_ += size;
  if (buffered_ > 0) {
    size_t take = std::min(size, sizeof(buffer_) - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < sizeof(buffer_)) return;
    block(buffer_);
    buffered_ = 0;
  }
  for (; size >= 64; p += 64, size -= 64) block(p);
  std::memcpy(buffer_, p, size);
  buffered_ = size;
}

std::string Sha256::digest() {
  uint64_t bits = total_bytes_ * 8;
  // Padding: one 1 bit, zeros up to 56 mod 64 bytes, then the message length in bits (big-endian).
  unsigned char pad[72] = {0x80};
  size_t pad_size = (buffered_ < 56 ? 56 : 120) - buffered_;
  for (int i = 0; i < 8; ++i) pad[pad_size + i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
  update(pad, pad_size + 8);
  std::string out(32, '\0');
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<char>(h_[i] >> (24 - 8 * j));
  }
  return out;
}

std::string sha256(const std::string& data) {
  Sha256 h;
  h.update(data);
  return h.digest();
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

// ---- keys ---------------------------------------------------------------------------------

// The vector instruction sets of this host. XLA:CPU generates code for the host it runs on, so
// an executable compiled on an AVX-512 machine would crash (SIGILL) on an AVX2 one that shares
// the cache directory (a network home, a cache baked into an image): the key includes them.
std::string host_isa() {
  std::string isa;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  isa = "x86_64";
  __builtin_cpu_init();
#define TORCHTPU_HOST_FEATURE(name) \
  if (__builtin_cpu_supports(name)) isa += " " name;
  TORCHTPU_HOST_FEATURE("sse4.2")
  TORCHTPU_HOST_FEATURE("avx")
  TORCHTPU_HOST_FEATURE("avx2")
  TORCHTPU_HOST_FEATURE("fma")
  TORCHTPU_HOST_FEATURE("f16c")
  TORCHTPU_HOST_FEATURE("bmi2")
  TORCHTPU_HOST_FEATURE("avx512f")
  TORCHTPU_HOST_FEATURE("avx512dq")
  TORCHTPU_HOST_FEATURE("avx512bw")
  TORCHTPU_HOST_FEATURE("avx512vl")
  TORCHTPU_HOST_FEATURE("avx512cd")
  TORCHTPU_HOST_FEATURE("avx512vnni")
  TORCHTPU_HOST_FEATURE("avx512bf16")
#undef TORCHTPU_HOST_FEATURE
#else
  // Elsewhere (aarch64): the kernel's feature list, e.g. "Features : fp asimd sve ...".
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("Features", 0) == 0 || line.rfind("flags", 0) == 0) {
      isa = line;
      break;
    }
  }
#endif
  return isa;
}

std::string platform_fingerprint(const pjrt::Client& client) {
  std::string f;
  put_field(f, std::string("torchtpu ") + kTorchtpuVersion);
  put_field(f, std::to_string(kFormatVersion));
  put_field(f, client.platform_name());
  put_field(f, client.platform_version());
  put_field(f, std::to_string(client.plugin()->api_major()) + "." +
                   std::to_string(client.plugin()->api_minor()));
  // Executables are compiled for a chip generation; the platform version may not name it.
  put_field(f, client.devices().empty() ? std::string() : client.devices()[0]->kind());
  // XLA:CPU's code depends on the host's instruction sets; a TPU's or GPU's does not.
  if (client.platform_name() == "cpu") put_field(f, host_isa());
  // Flags that change what XLA generates for the same program and options.
  for (const char* var : {"XLA_FLAGS", "LIBTPU_INIT_ARGS"}) {
    const char* v = std::getenv(var);
    put_field(f, std::string(var) + "=" + (v ? v : ""));
  }
  // std::map: attributes in a stable order.
  for (const auto& [name, value] : client.plugin()->attributes()) {
    put_field(f, name);
    put_field(f, attribute_text(value));
  }
  return f;
}

std::string cache_key(const std::string& fingerprint, const std::string& compile_options,
                      const std::string& mlir) {
  Sha256 h;
  std::string prefix;
  put_field(prefix, "torchtpu-compile-cache-key");
  put_field(prefix, fingerprint);
  put_field(prefix, compile_options);
  put_u64(prefix, mlir.size());
  h.update(prefix);
  h.update(mlir);
  return to_hex(h.digest());
}

// ---- the cache ----------------------------------------------------------------------------
DiskCache DiskCache::from_environment() {
  if (!config::flag("TORCHTPU_CACHE", true)) return DiskCache("", kDefaultMaxBytes, false);
  std::string dir;
  std::optional<std::string> configured = config::raw("TORCHTPU_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (configured) {
    dir = *configured;
  } else if (xdg && xdg[0] == '/') {
    dir = std::string(xdg) + "/torchtpu";
  } else if (home && *home) {
    dir = std::string(home) + "/.cache/torchtpu";
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  uint64_t max_bytes = kDefaultMaxBytes;
  std::optional<std::string> bound = config::raw("TORCHTPU_CACHE_MAX_BYTES");
  const char* m = bound ? bound->c_str() : nullptr;
  if (m && !parse_bytes(m, &max_bytes)) {
    std::fprintf(stderr,
                 "torchtpu: ignoring TORCHTPU_CACHE_MAX_BYTES=%s (expected bytes, e.g. 1073741824 "
                 "or 1G); using 2 GiB\n",
                 m);
    max_bytes = kDefaultMaxBytes;
  }
  return DiskCache(dir, max_bytes, !dir.empty());
}

DiskCache::DiskCache(std::string dir, uint64_t max_bytes, bool enabled)
    : dir_(std::move(dir)), max_bytes_(max_bytes), enabled_(enabled) {}

bool DiskCache::enabled() const {
  std::lock_guard<std::mutex> g(mutex_);
  return enabled_;
}

void DiskCache::disable() {
  std::lock_guard<std::mutex> g(mutex_);
  enabled_ = false;
}

void DiskCache::remove(const std::string& key) {
  if (enabled()) ::unlink(entry_path(key).c_str());
}

std::string DiskCache::entry_path(const std::string& key) const {
  return dir_ + "/" + key + kEntrySuffix;
}

DiskCache::Load DiskCache::load(const std::string& key, std::string* payload) {
  if (!enabled()) return Load::kMiss;
  std::string path = entry_path(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Load::kMiss;
  std::string data;
  bool ok = read_all(fd, &data) && parse_entry(data, key, payload);
  if (ok) {
    // Reading counts as use: eviction removes the entries with the oldest mtime.
    futimens(fd, nullptr);
  } else {
    // Remove the bad file, unless another process already replaced it with a new one (then the
    // path names a different inode than the one we read).
    struct stat ours, now;
    if (fstat(fd, &ours) == 0 && stat(path.c_str(), &now) == 0 && ours.st_ino == now.st_ino &&
        ours.st_dev == now.st_dev) {
      ::unlink(path.c_str());
    }
    payload->clear();
  }
  ::close(fd);
  return ok ? Load::kHit : Load::kCorrupt;
}

DiskCache::StoreResult DiskCache::store(const std::string& key, const std::string& payload) {
  StoreResult result;
  {
    std::lock_guard<std::mutex> g(mutex_);
    if (!enabled_) {
      result.error = "the disk cache is disabled";
      return result;
    }
    if (!dir_ready_) {
      if (!make_dirs(dir_)) {
        result.error = "cannot create " + dir_ + ": " + std::strerror(errno);
        return result;
      }
      dir_ready_ = true;
    }
  }
  // Written under a name no reader looks up, then renamed: rename is atomic on POSIX, so a
  // reader sees either no entry or the whole entry, however many processes write at once.
  std::string tmp = dir_ + "/" + key + ".tmp." + unique_suffix();
  std::string header = header_for(key, payload);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    result.error = "cannot create " + tmp + ": " + std::strerror(errno);
    return result;
  }
  bool ok = write_all(fd, header) && write_all(fd, payload);
  int saved = errno;
  // No fsync: a crash can at worst leave a short or empty entry, which load() detects and
  // removes, so durability is not worth a disk flush per compiled program.
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved = errno;
  }
  if (ok && std::rename(tmp.c_str(), entry_path(key).c_str()) != 0) {
    ok = false;
    saved = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    result.error = "cannot write " + entry_path(key) + ": " + std::strerror(saved);
    return result;
  }
  result.written = true;

  std::lock_guard<std::mutex> g(mutex_);
  uint64_t size = header.size() + payload.size();
  // The directory is scanned at the first write and whenever this process's running estimate
  // crosses the bound, not at every write: scans cost one stat per entry.
  if (!size_known_ || approx_bytes_ + size > max_bytes_) {
    result.evicted = evict_locked(key);
  } else {
    approx_bytes_ += size;
  }
  return result;
}

int64_t DiskCache::evict_locked(const std::string& keep) {
  struct Item {
    struct timespec mtime;
    uint64_t size;
    std::string path;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return 0;
  std::string keep_name = keep + kEntrySuffix;
  time_t now = time(nullptr);
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    bool entry = ends_with(name, kEntrySuffix);
    bool tmp = name.find(".tmp.") != std::string::npos;
    if (!entry && !tmp) continue;
    std::string path = dir_ + "/" + name;
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (tmp) {
      if (now - st.st_mtime > kStaleTmpSeconds) ::unlink(path.c_str());
      continue;
    }
    total += static_cast<uint64_t>(st.st_size);
    if (name != keep_name) items.push_back({st.st_mtim, static_cast<uint64_t>(st.st_size), path});
  }
  closedir(d);
  size_known_ = true;
  int64_t evicted = 0;
  if (total > max_bytes_) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                              : a.mtime.tv_nsec < b.mtime.tv_nsec;
    });
    // Evict down to 90% of the bound, so the next writes do not each trigger a scan.
    uint64_t target = max_bytes_ - max_bytes_ / 10;
    for (const Item& it : items) {
      if (total <= target) break;
      // Another process may have evicted it first; either way it is gone.
      if (::unlink(it.path.c_str()) == 0) ++evicted;
      total -= it.size;
    }
  }
  approx_bytes_ = total;
  return evicted;
}

}  // namespace torchtpu::runtime
