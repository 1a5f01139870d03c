// Durable, atomic replacement of small files (checkpoint publishing, LATEST, the run status file,
// the parameter server's port file), after google/leveldb's SetCurrentFile: write `<path>.tmp`,
// fsync it, rename it over `path`, fsync the directory. A reader sees the old content or the new,
// never a torn one, and after a crash or power loss the rename has happened or not.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace mt {

// What the trainer writes is its user's alone (issue 45: a checkpoint directory on shared storage
// is read by every user of the cluster otherwise): files 0600, directories it creates 0700. The
// process's umask can only take bits away.
inline constexpr mode_t kPrivateFileMode = 0600;
inline constexpr mode_t kPrivateDirMode = 0700;

// Creates `dir` and the missing directories above it, each 0700; directories that exist keep their
// mode. Returns false with `ec` set when one cannot be created.
bool create_private_directories(const std::filesystem::path& dir, std::error_code& ec);

// fsync of a file or a directory. Throws CheckpointError naming the path and errno's text.
void fsync_path(const std::filesystem::path& path, bool directory);

// rename(from, to), then fsync of `to`'s directory. Throws CheckpointError.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Replaces `path` with `content` as described above, a new file of `mode` (0600 unless a caller
// shares the file on purpose); on failure the temporary file is removed and `path` is untouched.
// Throws CheckpointError (exit 4).
void write_file_atomically(const std::filesystem::path& path, std::string_view content,
                           mode_t mode = kPrivateFileMode);

// Creates `dir` (0700) if missing and proves that it takes a durable file: creates, writes, fsyncs and
// removes a probe file in it. Empty on success, else what failed (the path and errno's text).
std::string probe_writable_directory(const std::filesystem::path& dir);

}  // namespace mt
