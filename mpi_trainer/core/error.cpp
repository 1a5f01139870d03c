#include "core/error.hpp"

#include <cerrno>
#include <cstring>
#include <new>

namespace mt {

static std::string library_message(const std::string& library, const std::string& detail,
                                   const char* call, const char* file, int line,
                                   const std::string& hint) {
  std::string msg = library + " call failed at " + file + ":" + std::to_string(line) + ": " +
                    call + ": " + detail;
  if (!hint.empty()) msg += " (hint: " + hint + ")";
  return msg;
}

LibraryError::LibraryError(const std::string& library, const std::string& detail,
                           const char* call, const char* file, int line, const std::string& hint)
    : Error(kExitInternal, library_message(library, detail, call, file, line, hint)) {}

void check_posix(bool ok, const char* call, const char* file, int line) {
  if (!ok) throw LibraryError("POSIX", std::strerror(errno), call, file, line);
}

ErrorReport describe_error(const std::exception_ptr& error) noexcept {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.exit_code(), e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitInternal, "out of memory (lower --batch-size)"};
  } catch (const std::exception& e) {
    return {kExitInternal, e.what()};
  } catch (...) {
    return {kExitInternal, "unknown error"};
  }
}

}  // namespace mt
