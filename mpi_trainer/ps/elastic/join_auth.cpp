#include "ps/elastic/join_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

namespace {

constexpr char kChallengeMagic[8] = {'M', 'T', 'J', 'O', 'I', 'N', '0', '1'};
constexpr char kProofLabel[] = "mpi_trainer join v1";  // its terminating NUL is hashed too
constexpr std::int32_t kAdmitted = 0x4e494f4a;         // "JOIN"
constexpr std::int32_t kRefused = 0x4f4e4f4e;          // "NONO"
constexpr std::size_t kMaxClaimBytes = 200;            // what a joiner says it is, for the log

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// A send waited for up to `seconds` (MPI_Test drives its progress: the parameter server's loop
// may be asleep on shared-memory doorbells, so nothing else would). One not done by then, or
// failed, is left to MPI with its buffer (transport's abandon). Never throws.
void send_within(std::vector<std::uint8_t> buffer, MPI_Comm comm, double seconds) {
  MPI_Request req = MPI_REQUEST_NULL;
  try {
    MT_MPI(MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_BYTE, 0, kTagJoinAuth, comm, &req));
    if (wait_for(&req, seconds)) return;
  } catch (const Error&) {
  }
  if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);
  abandon(std::move(buffer));
}

// Receives the peer's next handshake message into `buffer` within `seconds`: its size in bytes,
// or -1 with `error` set to MPI's error (left empty when the time ran out). A receive not
// completed is cancelled and its buffer left to MPI. Never throws.
long receive_within(std::vector<std::uint8_t>& buffer, MPI_Comm comm, double seconds, std::string* error) {
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Status status{};
  try {
    MT_MPI(MPI_Irecv(buffer.data(), static_cast<int>(buffer.size()), MPI_BYTE, 0, kTagJoinAuth, comm, &req));
    if (wait_for(&req, seconds, &status)) {
      int count = 0;
      MT_MPI(MPI_Get_count(&status, MPI_BYTE, &count));
      return count;
    }
  } catch (const Error& e) {
    *error = e.what();
  }
  if (req != MPI_REQUEST_NULL) {
    MPI_Cancel(&req);
    MPI_Request_free(&req);
    abandon(std::move(buffer));
  }
  return -1;
}

std::vector<std::uint8_t> verdict(std::int32_t v) {
  std::vector<std::uint8_t> b(sizeof v);
  std::memcpy(b.data(), &v, sizeof v);
  return b;
}

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (const std::uint8_t b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// What a joiner says about itself, made safe to print.
std::string printable(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < std::min(n, kMaxClaimBytes); ++i)
    s += std::isprint(p[i]) ? static_cast<char>(p[i]) : '?';
  return s;
}

}  // namespace

Sha256 hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> data) {
  Sha256 mac{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data.data(), data.size(), mac.data(), &len) ==
          nullptr ||
      len != mac.size())
    throw Error(kExitInternal, "OpenSSL's HMAC-SHA256 failed");
  return mac;
}

Sha256 join_proof(const std::string& secret, std::span<const std::uint8_t> nonce) {
  std::vector<std::uint8_t> message(kProofLabel, kProofLabel + sizeof kProofLabel);
  message.insert(message.end(), nonce.begin(), nonce.end());
  return hmac_sha256(bytes_of(secret), message);
}

bool join_proof_matches(const std::string& secret, std::span<const std::uint8_t> nonce,
                        std::span<const std::uint8_t> proof) {
  if (proof.size() != kJoinProofBytes) return false;
  const Sha256 expected = join_proof(secret, nonce);
  return CRYPTO_memcmp(expected.data(), proof.data(), expected.size()) == 0;
}

std::string random_bytes(std::size_t n) {
  std::string s(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(s.data()), static_cast<int>(n)) != 1)
    throw Error(kExitInternal, "OpenSSL's RAND_bytes failed: no random bytes for the join secret");
  return s;
}

std::filesystem::path default_join_secret_path(const std::filesystem::path& port_file) {
  return port_file.parent_path() / "join-secret";
}

std::string read_join_secret(const std::filesystem::path& path) {
  const std::string fix = " (the job's parameter server creates " + path.string() +
                          " when it starts with --max-workers; --join-secret names another file)";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(kExitConfig, "cannot read the join secret " + path.string() + ": " + std::strerror(errno) + fix);
  if (!S_ISREG(st.st_mode)) throw Error(kExitConfig, "the join secret " + path.string() + " is not a file");
  if (st.st_uid != ::geteuid())
    throw Error(kExitConfig, "the join secret " + path.string() + " belongs to another user (uid " +
                                 std::to_string(st.st_uid) + "): a job's secret must be its user's own");
  if ((st.st_mode & 077) != 0) {
    std::ostringstream mode;
    mode << std::oct << (st.st_mode & 0777);
    throw Error(kExitConfig, "the join secret " + path.string() + " can be read by others (mode " + mode.str() +
                                 "): run chmod 600 " + path.string() + ", or make a new secret");
  }
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof())
    throw Error(kExitConfig, "cannot read the join secret " + path.string() + ": " + std::strerror(errno));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.pop_back();
  if (s.size() < kJoinSecretMinBytes)
    throw Error(kExitConfig, "the join secret " + path.string() + " holds " + std::to_string(s.size()) +
                                 " bytes, fewer than " + std::to_string(kJoinSecretMinBytes) +
                                 " (e.g. openssl rand -hex 32 > FILE; chmod 600 FILE)");
  return s;
}

std::string load_or_create_join_secret(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (path.has_parent_path() && !create_private_directories(path.parent_path(), ec))
      throw Error(kExitConfig,
                  "cannot create " + path.parent_path().string() + " for the join secret: " + ec.message());
    const std::string secret = random_bytes(32);
    write_file_atomically(path, hex(bytes_of(secret)) + '\n');
  }
  return read_join_secret(path);
}

std::string authenticate_joiner(MPI_Comm inter, const std::string& secret, double deadline_s) {
  std::string why;
  try {
    const std::string nonce = random_bytes(kJoinNonceBytes);
    std::vector<std::uint8_t> challenge(sizeof kChallengeMagic + nonce.size());
    std::memcpy(challenge.data(), kChallengeMagic, sizeof kChallengeMagic);
    std::memcpy(challenge.data() + sizeof kChallengeMagic, nonce.data(), nonce.size());
    send_within(std::move(challenge), inter, 0);  // completed while the answer is awaited

    std::vector<std::uint8_t> answer(kJoinProofBytes + kMaxClaimBytes);
    std::string error;
    const long count = receive_within(answer, inter, deadline_s, &error);
    if (count < 0) {
      why = error.empty() ? "no answer to the challenge within " + std::to_string(static_cast<int>(deadline_s)) + " s"
                          : "the handshake failed (" + error + ")";
    } else if (static_cast<std::size_t>(count) < kJoinProofBytes) {
      why = "a malformed answer (" + std::to_string(count) + " bytes)";
    } else {
      const auto n = static_cast<std::size_t>(count);
      const std::string claim =
          n > kJoinProofBytes
              ? " (it says it is " + printable(answer.data() + kJoinProofBytes, n - kJoinProofBytes) + ", not verified)"
              : "";
      if (!join_proof_matches(secret, bytes_of(nonce), std::span(answer.data(), kJoinProofBytes)))
        why = "a wrong proof of the job's join secret" + claim;
    }
  } catch (const Error& e) {  // OpenSSL failed: nobody is let in on a failed check
    why = std::string("the handshake failed (") + e.what() + ")";
  }
  send_within(verdict(why.empty() ? kAdmitted : kRefused), inter, 2);
  return why;
}

void prove_join_secret(MPI_Comm ps, const std::string& secret, bool answer, double deadline_s) {
  const auto t0 = Clock::now();  // one deadline for the whole handshake
  const auto receive = [&](std::vector<std::uint8_t>* buffer, const char* what) {
    std::string error;
    const long count = receive_within(*buffer, ps, std::max(0.0, deadline_s - since(t0)), &error);
    if (count < 0 || static_cast<std::size_t>(count) != buffer->size())
      throw Error(kExitPsLost, std::string("the parameter server sent no ") + what + " within " +
                                   std::to_string(static_cast<int>(deadline_s)) + " s" +
                                   (error.empty() ? "" : " (" + error + ")") +
                                   ": is it an mpi_trainer of the same version?");
  };
  std::vector<std::uint8_t> challenge(sizeof kChallengeMagic + kJoinNonceBytes);
  receive(&challenge, "challenge");
  if (std::memcmp(challenge.data(), kChallengeMagic, sizeof kChallengeMagic) != 0)
    throw Error(kExitPsLost, "the parameter server's challenge is not mpi_trainer's (another version?)");
  if (answer) {
    const Sha256 proof = join_proof(secret, std::span(challenge).subspan(sizeof kChallengeMagic));
    std::vector<std::uint8_t> message(proof.begin(), proof.end());
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string claim = "pid " + std::to_string(::getpid()) + " on " + host;
    message.insert(message.end(), claim.begin(), claim.begin() + std::min(claim.size(), kMaxClaimBytes));
    send_within(std::move(message), ps, 0);  // completed while the verdict is awaited
  }
  std::vector<std::uint8_t> reply(sizeof(std::int32_t));
  receive(&reply, "verdict on this worker's proof of the join secret");
  std::int32_t v = 0;
  std::memcpy(&v, reply.data(), sizeof v);
  if (v != kAdmitted)
    throw Error(kExitConfig,
                "the parameter server refused this worker: it did not prove the job's join secret "
                "(give `join` the job's --join-secret, or the same --ckpt-dir / --port-file, whose "
                "join-secret the job wrote)");
}

}  // namespace mt
