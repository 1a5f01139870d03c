// Fuzz target (issue 45): the protocol's message header as a parameter server or worker receives
// it (ps/wire/protocol.hpp check_header): any 144 bytes and a payload bound give a verdict, never a
// crash. The first 8 bytes are the bound, the next 144 the header.
#include <cstdint>
#include <cstring>

#include "ps/wire/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::int64_t bound = 0;
  mt::MsgHeader h;
  if (size < sizeof bound + sizeof h) return 0;
  std::memcpy(&bound, data, sizeof bound);
  std::memcpy(&h, data + sizeof bound, sizeof h);
  const std::string why = mt::check_header(h, bound);
  // A header that passes has the magic, the version and a payload within [0, bound].
  if (why.empty() && (h.magic != mt::kMsgMagic || h.payload < 0 || h.payload > bound)) __builtin_trap();
  return 0;
}
