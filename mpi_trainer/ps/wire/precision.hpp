// The precision of the values on the wire between workers and shards (--push-precision). fp32
// sends the floats as they are. bf16 (bfloat16: fp32's sign and 8-bit exponent, 7 bits of
// mantissa) halves the bytes of every push and reply: a worker rounds its gradient to bf16, a
// shard rounds the parameters of its reply. Each shard keeps and updates its fp32 master
// parameters, momenta and gap means; it remembers, per worker, the fp32 parameters it last sent
// in bf16, so the gap-aware penalty's |θ now − θ pulled| stays in the shard's fp32 values (a
// parameter's usual step can be far smaller than its bf16 rounding). The BatchNorm statistics a
// push carries stay fp32 (a few thousand values on shard 0). Two bf16 values fill one float slot
// of a message: element 2i in the low half of slot i, element 2i + 1 in the high half.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace mt {

enum class PushPrecision : std::int32_t { kFp32 = 0, kBf16 = 1 };

// "fp32" | "bf16"; throws UsageError naming --push-precision.
PushPrecision parse_push_precision(const std::string& text);
const char* to_string(PushPrecision p);
// Bytes one value takes on the wire.
inline double wire_bytes_per_value(PushPrecision p) { return p == PushPrecision::kBf16 ? 2.0 : 4.0; }

// The float slots `values` values take in a message.
inline std::int64_t wire_floats(PushPrecision p, std::int64_t values) {
  return p == PushPrecision::kBf16 ? (values + 1) / 2 : values;
}

// fp32 -> bf16, rounded to nearest, ties to even; a NaN stays a (quiet) NaN, infinities stay.
inline std::uint16_t to_bf16(std::uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// `src` into wire_floats(p, src.size()) slots at `dst` (an odd count leaves the last high half 0).
void encode_values(PushPrecision p, std::span<const float> src, float* dst);
// wire_floats(p, dst.size()) slots at `src` into `dst`.
void decode_values(PushPrecision p, const float* src, std::span<float> dst);
// Each value as the wire would deliver it (encode then decode, in place): virtual runs.
void round_to_wire(PushPrecision p, std::span<float> values);

}  // namespace mt
