#include "app/report_command.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace mt {

namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The report script this binary runs: $MT_REPORT_SCRIPT, else the installed copy
// (<prefix>/share/mpi_trainer/report/report.py beside <prefix>/bin), else the source tree's.
// Empty when none exists.
std::string report_script(const char* argv0) {
  if (const char* s = std::getenv("MT_REPORT_SCRIPT"); s && *s) return is_file(s) ? s : "";
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) exe = fs::absolute(argv0, ec);
  const fs::path installed = exe.parent_path().parent_path() / "share" / "mpi_trainer" / "report" / "report.py";
  if (is_file(installed)) return installed.string();
#ifdef MT_REPORT_SOURCE_DIR
  const fs::path source = fs::path(MT_REPORT_SOURCE_DIR) / "report.py";
  if (is_file(source)) return source.string();
#endif
  return "";
}

[[noreturn]] void exec_report(int argc, char** argv) {
  const std::string script = report_script(argc > 0 ? argv[0] : "mpi_trainer");
  if (script.empty())
    throw DataError("report.py not found beside this binary (share/mpi_trainer/report) "
                    "nor in its source tree; set MT_REPORT_SCRIPT to mpi_trainer/report/report.py");
  const char* env_python = std::getenv("MT_PYTHON");
  const std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  std::vector<std::string> args{python, script};
  for (int i = 2; i < argc; ++i) args.emplace_back(argv[i]);  // after `mpi_trainer report`
  std::vector<char*> raw;
  for (auto& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  execv(python.c_str(), raw.data());
  throw DataError("report: cannot start " + python + " (" + std::strerror(errno) +
                  "): it needs Python 3 with matplotlib (launch/setup.sh installs Debian's python3-matplotlib; "
                  "MT_PYTHON names another interpreter)");
}

}  // namespace

int report_command(int argc, char** argv, std::ostream& err) {
  try {
    exec_report(argc, argv);
  } catch (const Error& e) {
    err << "mpi_trainer: error: " << e.what() << '\n';
    return e.exit_code();
  }
}

}  // namespace mt
