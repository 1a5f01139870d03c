#include "core/line_output.hpp"

#include <unistd.h>

#include <cerrno>

namespace mt {

bool LineWriteBuf::emit(const char* s, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;  // the stream goes bad, as std::cerr's own buffer would
    }
    s += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool LineWriteBuf::append(const char* s, std::size_t n) {
  std::string& line = pending_[std::this_thread::get_id()];
  const std::string_view text(s, n);
  const std::size_t last_newline = text.rfind('\n');
  if (last_newline == std::string_view::npos) {
    line.append(text);
    return true;
  }
  // Everything up to the last newline goes out now, in one write.
  line.append(text.substr(0, last_newline + 1));
  const bool ok = emit(line.data(), line.size());
  line.assign(text.substr(last_newline + 1));
  if (line.empty()) pending_.erase(std::this_thread::get_id());
  return ok;
}

LineWriteBuf::int_type LineWriteBuf::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  const char c = traits_type::to_char_type(ch);
  std::lock_guard<std::mutex> lock(mu_);
  return append(&c, 1) ? ch : traits_type::eof();
}

std::streamsize LineWriteBuf::xsputn(const char* s, std::streamsize n) {
  if (n <= 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return append(s, static_cast<std::size_t>(n)) ? n : 0;
}

int LineWriteBuf::sync() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = pending_.find(std::this_thread::get_id());
  if (it == pending_.end()) return 0;
  const bool ok = emit(it->second.data(), it->second.size());
  pending_.erase(it);
  return ok ? 0 : -1;
}

LineWriteBuf::~LineWriteBuf() {
  // Unfinished lines of every thread, so that nothing written is lost at the end.
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [thread, line] : pending_) emit(line.data(), line.size());
}

LineOutput::LineOutput(std::ostream& stream, int fd)
    : stream_(stream), buf_(fd), old_(stream.rdbuf()), old_flags_(stream.flags()) {
  stream_.flush();
  stream_.rdbuf(&buf_);
  stream_.unsetf(std::ios_base::unitbuf);
}

LineOutput::~LineOutput() {
  stream_.flush();
  stream_.rdbuf(old_);
  stream_.flags(old_flags_);
}

}  // namespace mt
