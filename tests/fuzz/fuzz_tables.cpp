// Fuzz target (issue 45): the tables a user gives on the command line or copies from elsewhere.
// The first byte picks the parser, the rest is the file's text:
//   0: a device table (--emulate-device FILE, plan --devices)   app/emulation.cpp
//   1: a revocation model (--revocation-model FILE), AWS's bands  ps/inject/fault_injection.cpp,
//      table and an aws-band:BAND name                            plan/revocation_bands.cpp
//   2: a price table (--prices FILE)                             plan/cost.cpp
//   3: --revoke and --corrupt-push specifications                ps/inject/fault_injection.cpp
// A bad input must end in mt::Error (a clear message, an exit code); anything else (another
// exception, a crash, a sanitizer report) is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "plan/cost.hpp"
#include "app/emulation.hpp"
#include "core/error.hpp"
#include "plan/revocation_model.hpp"
#include "ps/inject/fault_injection.hpp"
#include "plan/revocation_bands.hpp"

namespace {

// The user's way in: a file, as --emulate-device FILE and --prices FILE read it.
template <class Load>
void through_file(const std::string& text, Load load) {
  const std::string path = "/tmp/mt-fuzz-table-" + std::to_string(static_cast<long>(getpid()));
  std::ofstream(path, std::ios::binary) << text;
  try {
    load(path);
  } catch (...) {
    std::remove(path.c_str());
    throw;
  }
  std::remove(path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: through_file(text, [](const std::string& p) { (void)mt::DeviceTable::from_file(p); }); break;
      case 1:
        try {
          (void)mt::RevocationModel::parse(text, "fuzz");
        } catch (const mt::Error&) {
        }
        try {
          (void)mt::parse_aws_bands(text, "fuzz");
        } catch (const mt::Error&) {
        }
        (void)mt::RevocationModel::load("aws-band:" + text.substr(0, 32));
        break;
      case 2: through_file(text, [](const std::string& p) { (void)mt::PriceTable::from_file(p); }); break;
      default:
        try {
          (void)mt::parse_revoke(text);
        } catch (const mt::Error&) {
        }
        (void)mt::parse_corrupt_push(text, 1);
    }
  } catch (const mt::Error&) {
  }
  return 0;
}
