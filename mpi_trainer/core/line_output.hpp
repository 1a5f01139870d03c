// Whole lines, one write(2) each, for the process's std::cout and std::cerr.
//
// Under mpirun every rank's output reaches one terminal (or one file) through the launcher, and
// a line written in pieces (`std::cerr << "a" << x << "\n"` is several writes on an unbuffered
// stream) can be cut by another rank's line. Users read those lines and scripts and tests grep
// them, so each complete line leaves this process in a single write(2), whatever the number of
// `<<` that built it and whichever thread wrote it. A partial line waits for its newline, an
// explicit flush, or the end of the process.
#pragma once

#include <mutex>
#include <ostream>
#include <streambuf>
#include <string>
#include <thread>
#include <unordered_map>

namespace mt {

class LineWriteBuf : public std::streambuf {
 public:
  explicit LineWriteBuf(int fd) : fd_(fd) {}
  ~LineWriteBuf() override;
  LineWriteBuf(const LineWriteBuf&) = delete;
  LineWriteBuf& operator=(const LineWriteBuf&) = delete;

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;  // the calling thread's partial line, as it is

 private:
  bool append(const char* s, std::size_t n);  // under mu_; false when a write failed
  bool emit(const char* s, std::size_t n);

  int fd_;
  std::mutex mu_;
  std::unordered_map<std::thread::id, std::string> pending_;  // each thread's unfinished line
};

// Points `stream` at a LineWriteBuf on `fd` for the object's lifetime (std::cerr also loses its
// unit buffering, which would flush every piece), and puts the old buffer back afterwards.
class LineOutput {
 public:
  LineOutput(std::ostream& stream, int fd);
  ~LineOutput();
  LineOutput(const LineOutput&) = delete;
  LineOutput& operator=(const LineOutput&) = delete;

 private:
  std::ostream& stream_;
  LineWriteBuf buf_;
  std::streambuf* old_;
  std::ios_base::fmtflags old_flags_;
};

}  // namespace mt
