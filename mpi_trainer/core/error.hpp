// Typed errors and the exit codes main() maps them to (docs/architecture.md, "Outputs and exit codes").
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace mt {

// Documented process exit codes (contract).
enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,   // a library call failed (oneDNN, CUDA, MPI, HDF5, POSIX)
  kExitUsage = 2,      // bad command line
  kExitConfig = 3,     // bad configuration or data
  kExitCheckpoint = 4, // checkpoint could not be read or written
  kExitPsLost = 10,    // worker side: the parameter server vanished
  kExitSuperseded = 11,  // a former parameter server woke after the survivors took its place: wrote nothing
  kExitRequeue = 75,   // checkpointed on a signal: rerun with --resume auto
  kExitInterrupted = 130,  // checkpointed on SIGINT (Ctrl-C): rerun the same command to continue
};

class Error : public std::runtime_error {
 public:
  Error(int exit_code, const std::string& what) : std::runtime_error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// Bad flags or arguments.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(kExitUsage, what) {}
};

// Bad configuration or input data; the message names the file and the problem.
class DataError : public Error {
 public:
  explicit DataError(const std::string& what) : Error(kExitConfig, what) {}
};

class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& what) : Error(kExitCheckpoint, what) {}
};

// This process was the parameter server, was taken for lost (hung) and has woken after another took
// its place (a newer epoch in the checkpoint directory, ckpt/checkpoint.hpp): it must neither
// publish nor answer anything, and ends quietly (exit 11).
class PsSuperseded : public Error {
 public:
  explicit PsSuperseded(const std::string& what) : Error(kExitSuperseded, what) {}
};

// A failed call into a library; carries the call text and its location.
class LibraryError : public Error {
 public:
  LibraryError(const std::string& library, const std::string& detail, const char* call,
               const char* file, int line, const std::string& hint = {});
};

// Any exception as an exit code and a message: mt::Error's own code; out of memory, other
// standard exceptions and unknown ones are internal errors (exit 1).
struct ErrorReport {
  int exit_code = kExitInternal;
  std::string what;
};
ErrorReport describe_error(const std::exception_ptr& error) noexcept;

// Throws LibraryError("POSIX", strerror(errno)) when `ok` is false.
void check_posix(bool ok, const char* call, const char* file, int line);

}  // namespace mt

#define MT_CHECK_POSIX(expr) ::mt::check_posix((expr), #expr, __FILE__, __LINE__)

// Internal invariant (not input validation): stays on in release builds.
#define MT_ASSERT(cond, msg)                                                              \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::mt::Error(::mt::kExitInternal, std::string("internal error at ") + __FILE__ + \
                                                 ":" + std::to_string(__LINE__) + ": " +  \
                                                 (msg) + " [" #cond "]");                 \
  } while (0)
