// Durable, atomic replacement of small files (checkpoint publishing, LATEST, the run status file,
// the parameter server's port file), after google/leveldb's SetCurrentFile: write `<path>.tmp`,
// fsync it, rename it over `path`, fsync the directory. A reader sees the old content or the new,
// never a torn one, and after a crash or power loss the rename has happened or not.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace mt {

// fsync of a file or a directory. Throws CheckpointError naming the path and errno's text.
void fsync_path(const std::filesystem::path& path, bool directory);

// rename(from, to), then fsync of `to`'s directory. Throws CheckpointError.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Replaces `path` with `content` as described above; on failure the temporary file is removed
// and `path` is untouched. Throws CheckpointError (exit 4).
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

// Creates `dir` if missing and proves that it takes a durable file: creates, writes, fsyncs and
// removes a probe file in it. Empty on success, else what failed (the path and errno's text).
std::string probe_writable_directory(const std::filesystem::path& dir);

}  // namespace mt
