#include "ps/wire/precision.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.hpp"

namespace mt {

PushPrecision parse_push_precision(const std::string& text) {
  if (text == "fp32") return PushPrecision::kFp32;
  if (text == "bf16") return PushPrecision::kBf16;
  throw UsageError("--push-precision must be fp32 or bf16, not '" + text + "'");
}

const char* to_string(PushPrecision p) { return p == PushPrecision::kBf16 ? "bf16" : "fp32"; }

namespace {

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

// The slots are written and read as 32-bit words through memcpy (no aliasing of float storage as
// integers); GCC turns each loop into vector shifts and masks.
void encode_values(PushPrecision p, std::span<const float> src, float* dst) {
  if (p == PushPrecision::kFp32) {
    std::copy(src.begin(), src.end(), dst);
    return;
  }
  const std::size_t n = src.size(), pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    const std::uint32_t word =
        std::uint32_t{to_bf16(bits_of(src[2 * i]))} | (std::uint32_t{to_bf16(bits_of(src[2 * i + 1]))} << 16);
    std::memcpy(dst + i, &word, sizeof word);
  }
  if (n % 2 != 0) {
    const std::uint32_t word = to_bf16(bits_of(src[n - 1]));
    std::memcpy(dst + pairs, &word, sizeof word);
  }
}

void decode_values(PushPrecision p, const float* src, std::span<float> dst) {
  if (p == PushPrecision::kFp32) {
    std::copy_n(src, dst.size(), dst.begin());
    return;
  }
  const std::size_t n = dst.size(), pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    std::uint32_t word;
    std::memcpy(&word, src + i, sizeof word);
    dst[2 * i] = float_of(word << 16);
    dst[2 * i + 1] = float_of(word & 0xffff0000u);
  }
  if (n % 2 != 0) {
    std::uint32_t word;
    std::memcpy(&word, src + pairs, sizeof word);
    dst[n - 1] = float_of(word << 16);
  }
}

void round_to_wire(PushPrecision p, std::span<float> values) {
  if (p == PushPrecision::kFp32) return;
  for (float& v : values)
    v = float_of(std::uint32_t{to_bf16(bits_of(v))} << 16);
}

}  // namespace mt
