// TensorBoard event files (app/tensorboard.hpp).
#include "app/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace mt {

namespace {

constexpr std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protocol-buffer wire format, the parts an Event of scalars uses.
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
template <typename T>
void little_endian(std::string& out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86 and arm64 are little-endian; so is the format
  out.append(reinterpret_cast<const char*>(b), sizeof(T));
}
void bytes_field(std::string& out, int field, std::string_view bytes) {
  varint(out, static_cast<std::uint64_t>(field) << 3 | 2);  // wire type 2: length-delimited
  varint(out, bytes.size());
  out.append(bytes);
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2 (float)).
std::string event_head(double wall_time, std::int64_t step) {
  std::string e;
  e.push_back(0x09);  // field 1, wire type 1: 64-bit
  little_endian(e, wall_time);
  if (step != 0) {
    e.push_back(0x10);  // field 2, wire type 0: varint
    varint(e, static_cast<std::uint64_t>(step));
  }
  return e;
}

double wall_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  static constexpr auto table = crc32c_table();
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : bytes)
    c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw DataError("--tensorboard " + dir + ": cannot create the directory: " + ec.message());
  // TensorBoard's own naming: it reads files whose names hold "tfevents", in name order.
  const double now = wall_now();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<long long>(now)) + '.' +
                                         host_name() + '.' + std::to_string(getpid()) + ".mpi_trainer"))
              .string();
  out_.open(path_, std::ios::out | std::ios::binary | std::ios::app);
  if (!out_) throw DataError("--tensorboard " + path_ + ": cannot open for writing: " + std::strerror(errno));
  std::string e = event_head(now, 0);
  bytes_field(e, 3, "brain.Event:2");
  record(e);
}

void EventFileWriter::record(const std::string& event) {
  std::string frame;
  little_endian(frame, static_cast<std::uint64_t>(event.size()));
  const std::string length = frame;
  little_endian(frame, masked_crc32c(length));
  frame += event;
  little_endian(frame, masked_crc32c(event));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
  out_.flush();
  if (!out_) throw DataError("--tensorboard " + path_ + ": write failed (disk full?)");
}

void EventFileWriter::scalars(std::int64_t step, double wall_time,
                              const std::vector<std::pair<std::string, double>>& values) {
  if (!out_.is_open() || values.empty()) return;
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    value.push_back(0x15);  // field 2, wire type 5: 32-bit
    little_endian(value, static_cast<float>(v));
    bytes_field(summary, 1, value);
  }
  std::string e = event_head(wall_time < 0 ? wall_now() : wall_time, step);
  bytes_field(e, 5, summary);
  record(e);
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const nlohmann::ordered_json& event) {
  std::vector<std::pair<std::string, double>> out;
  const auto add = [&out](const nlohmann::ordered_json& from, const char* key, const std::string& tag) {
    const auto it = from.find(key);
    if (it != from.end() && it->is_number() && std::isfinite(it->get<double>()))
      out.emplace_back(tag, it->get<double>());
  };
  const std::string kind = event.value("event", "");
  if (kind == "progress") {
    add(event, "loss", "train/loss");
    add(event, "train_accuracy", "train/accuracy");
    add(event, "lr", "train/lr");
    add(event, "momentum", "train/momentum");
    add(event, "images_per_second", "throughput/images_per_second");
    add(event, "active_workers", "workers/active");
    add(event, "mean_staleness", "staleness/mean");
    add(event, "dropped_stale_pushes", "staleness/dropped_pushes");
    add(event, "predicted_seconds_left", "time/predicted_seconds_left");
    add(event, "predicted_cost_usd", "cost/predicted_usd");
    if (const auto w = event.find("workers"); w != event.end() && w->is_array())
      for (const auto& x : *w) {
        if (!x.contains("rank")) continue;
        const std::string prefix = "worker/" + std::to_string(x["rank"].get<int>()) + '/';
        add(x, "images_per_second", prefix + "images_per_second");
        add(x, "mean_staleness", prefix + "staleness");
      }
  } else if (kind == "eval") {
    add(event, "test_accuracy", "test/accuracy");
    add(event, "test_loss", "test/loss");
  } else if (kind == "revocation" || kind == "join") {
    add(event, "active_workers", "workers/active");
  } else if (kind == "summary") {
    add(event, "cost_usd", "cost/usd");
    add(event, "train_seconds", "time/run_seconds");
  }
  return out;
}

}  // namespace mt
