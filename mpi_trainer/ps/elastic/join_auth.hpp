// Join authentication (issue 45): only a process that knows the job's secret can join it.
//
// The secret is a file readable by its user alone (0600 or 0400, owned by the user): by default
// `join-secret` beside the port file, created by shard 0 with 32 random bytes (hex) the first time
// and kept across restarts, or one the user names with --join-secret. A joiner connects, shard 0's
// accept thread sends a random nonce, the joiner answers HMAC-SHA256(secret, label | nonce)
// (OpenSSL), and only a matching answer (compared in constant time) lets the joiner in. A wrong,
// missing or late answer (the deadline) is refused: the joiner gets a refusal, shard 0 logs it, and
// the connection is left alone (MPI_Comm_disconnect is collective: a refused process could stall
// it), so the run is not disturbed. What this does not protect (MPI's traffic is not encrypted,
// the joiner does not authenticate the parameter server): docs/fault-model.md.
#pragma once

#include <mpi.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace mt {

inline constexpr int kTagJoinAuth = 18;  // the handshake's messages, both ways
inline constexpr std::size_t kJoinNonceBytes = 32;
inline constexpr std::size_t kJoinProofBytes = 32;      // HMAC-SHA256
inline constexpr std::size_t kJoinSecretMinBytes = 16;  // a user's own secret: at least this long

using Sha256 = std::array<std::uint8_t, 32>;

// HMAC-SHA256 of `data` under `key` (OpenSSL's HMAC). Throws Error on a library failure.
Sha256 hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data);

// What a joiner sends for `nonce`: the HMAC of a fixed label (the protocol's name and version)
// followed by the nonce.
Sha256 join_proof(const std::string& secret, std::span<const std::uint8_t> nonce);

// `proof` is join_proof(secret, nonce); compared in constant time.
bool join_proof_matches(const std::string& secret, std::span<const std::uint8_t> nonce,
                        std::span<const std::uint8_t> proof);

// `n` bytes from OpenSSL's RAND_bytes (the kernel's random source). Throws Error.
std::string random_bytes(std::size_t n);

// Where the secret lives when --join-secret is not given: `join-secret` beside the port file.
std::filesystem::path default_join_secret_path(const std::filesystem::path& port_file);

// Shard 0's side: the secret in `path` if the file exists (it must be the user's alone and hold at
// least kJoinSecretMinBytes once trailing whitespace is trimmed), else a new one written there
// (0600, its directory 0700 when created). Throws Error with exit 3 (kExitConfig) naming the
// path and the fix.
std::string load_or_create_join_secret(const std::filesystem::path& path);

// A joiner's side: the secret in `path`, which must exist (same checks). Throws Error, exit 3.
std::string read_join_secret(const std::filesystem::path& path);

// The accept thread's side of the handshake on a new intercommunicator: sends a nonce, waits up
// to `deadline_s` for the proof, answers the verdict. Empty when the joiner proved the secret,
// else why not (for the log; a failure of MPI or OpenSSL refuses too). Never throws, never blocks
// past the deadline; a refused connection is not freed.
std::string authenticate_joiner(MPI_Comm inter, const std::string& secret, double deadline_s);

// The joiner's side, right after MPI_Comm_connect. `answer` false sends no proof (a test hook
// for a joiner that connects and stays silent). Returns normally when admitted; throws Error with
// exit 3 when refused, exit 10 (kExitPsLost) when the parameter server does not answer in time.
void prove_join_secret(MPI_Comm ps, const std::string& secret, bool answer, double deadline_s);

}  // namespace mt
