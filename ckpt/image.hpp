// Internal to mt_ckpt: a checkpoint as the bytes of an HDF5 file built in memory (the fast path:
// the writing thread's image is kept open and rewritten in place when the layout repeats, chunks
// written directly with their Fletcher32), and the durable write of those bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace mt::ckpt::detail {

// Returns the writing thread's image buffer, kept between checkpoints; `rewritten`: the kept
// in-memory file was rewritten rather than created anew. `name` names the file in errors.
const std::vector<char>& file_image(const Checkpoint& c, double created_unix, const std::filesystem::path& name,
                                    bool* rewritten);

// Writes `image` to `tmp` and fsyncs it; the fault hook (set_mid_write_hook) runs with half of it
// written (a torn file). On failure the temporary file is removed and CheckpointError names it,
// the step and errno's text.
void write_durably(const std::filesystem::path& tmp, const std::vector<char>& image, std::int64_t global_step);

}  // namespace mt::ckpt::detail
