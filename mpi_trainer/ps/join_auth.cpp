#include "ps/join_auth.hpp"

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
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "ps/transport.hpp"

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

// Buffers of sends that had not completed when a handshake ended: MPI may still read them, so
// they live as long as the process (a few dozen bytes per refused joiner).
void keep_for_mpi(std::shared_ptr<void> buffer) {
  static std::mutex mutex;
  static std::vector<std::shared_ptr<void>> kept;
  std::lock_guard<std::mutex> lock(mutex);
  kept.push_back(std::move(buffer));
}

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(std::max(len, 0)));
}

// Waits for `req` until `deadline`. Returns MPI_SUCCESS when it completed, the MPI error when it
// failed, or -1 when the deadline passed (the request is still active).
int wait_until(MPI_Request* req, Clock::time_point deadline, MPI_Status* status) {
  for (;;) {
    int done = 0;
    if (const int rc = MPI_Test(req, &done, status); rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (Clock::now() >= deadline) return -1;
    nap_microseconds(1000);
  }
}

// A send of `buffer` waited for up to `seconds` (MPI_Test drives its progress: the parameter
// server's loop may be asleep on shared-memory doorbells, so nothing else would). One not done
// by then is left to MPI, its buffer kept.
void send_within(std::shared_ptr<std::vector<std::uint8_t>> buffer, MPI_Comm comm, double seconds) {
  MPI_Request req = MPI_REQUEST_NULL;
  if (MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, 0, kTagJoinAuth, comm, &req) !=
      MPI_SUCCESS)
    return;
  if (wait_until(&req, Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)),
                 MPI_STATUS_IGNORE) == MPI_SUCCESS)
    return;
  if (req != MPI_REQUEST_NULL) MPI_Request_free(&req);
  keep_for_mpi(std::move(buffer));
}

std::shared_ptr<std::vector<std::uint8_t>> verdict(std::int32_t v) {
  auto b = std::make_shared<std::vector<std::uint8_t>>(sizeof v);
  std::memcpy(b->data(), &v, sizeof v);
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
      throw Error(kExitConfig, "cannot create " + path.parent_path().string() + " for the join secret: " +
                                   ec.message());
    const std::string secret = random_bytes(32);
    write_file_atomically(path, hex(bytes_of(secret)) + '\n');
  }
  return read_join_secret(path);
}

std::string authenticate_joiner(MPI_Comm inter, const std::string& secret, double deadline_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(deadline_s));
  const std::string nonce = random_bytes(kJoinNonceBytes);
  auto challenge = std::make_shared<std::vector<std::uint8_t>>(sizeof kChallengeMagic + nonce.size());
  std::memcpy(challenge->data(), kChallengeMagic, sizeof kChallengeMagic);
  std::memcpy(challenge->data() + sizeof kChallengeMagic, nonce.data(), nonce.size());
  send_within(challenge, inter, 0);  // completed while the answer is awaited

  std::vector<std::uint8_t> answer(kJoinProofBytes + kMaxClaimBytes);
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Status status{};
  int rc = MPI_Irecv(answer.data(), static_cast<int>(answer.size()), MPI_BYTE, 0, kTagJoinAuth, inter, &req);
  if (rc == MPI_SUCCESS) rc = wait_until(&req, deadline, &status);
  std::string why;
  int count = 0;
  if (rc == -1) {
    MPI_Cancel(&req);
    MPI_Request_free(&req);
    why = "no answer to the challenge within " + std::to_string(static_cast<int>(deadline_s)) + " s";
  } else if (rc != MPI_SUCCESS) {
    why = "the handshake failed (" + mpi_error_text(rc) + ")";
  } else if (MPI_Get_count(&status, MPI_BYTE, &count) != MPI_SUCCESS || count < 0 ||
             static_cast<std::size_t>(count) < kJoinProofBytes) {
    why = "a malformed answer (" + std::to_string(count) + " bytes)";
  } else {
    const std::string claim = static_cast<std::size_t>(count) > kJoinProofBytes
                                  ? " (it says it is " +
                                        printable(answer.data() + kJoinProofBytes,
                                                  static_cast<std::size_t>(count) - kJoinProofBytes) +
                                        ", not verified)"
                                  : "";
    if (!join_proof_matches(secret, bytes_of(nonce), std::span(answer.data(), kJoinProofBytes)))
      why = "a wrong proof of the job's join secret" + claim;
  }
  send_within(verdict(why.empty() ? kAdmitted : kRefused), inter, 2);
  return why;
}

void prove_join_secret(MPI_Comm ps, const std::string& secret, bool answer, double deadline_s) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(deadline_s));
  const auto receive = [&](std::vector<std::uint8_t>* buffer, const char* what) {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status status{};
    int rc = MPI_Irecv(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, 0, kTagJoinAuth, ps, &req);
    if (rc == MPI_SUCCESS) rc = wait_until(&req, deadline, &status);
    int count = 0;
    if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, &count);
    if (rc == -1) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
    }
    if (rc != MPI_SUCCESS || static_cast<std::size_t>(count) != buffer->size())
      throw Error(kExitPsLost, std::string("the parameter server sent no ") + what + " within " +
                                   std::to_string(static_cast<int>(deadline_s)) + " s" +
                                   (rc > 0 ? " (" + mpi_error_text(rc) + ")" : "") +
                                   ": is it an mpi_trainer of the same version?");
  };
  std::vector<std::uint8_t> challenge(sizeof kChallengeMagic + kJoinNonceBytes);
  receive(&challenge, "challenge");
  if (std::memcmp(challenge.data(), kChallengeMagic, sizeof kChallengeMagic) != 0)
    throw Error(kExitPsLost, "the parameter server's challenge is not mpi_trainer's (another version?)");
  if (answer) {
    const Sha256 proof = join_proof(secret, std::span(challenge).subspan(sizeof kChallengeMagic));
    auto message = std::make_shared<std::vector<std::uint8_t>>(proof.begin(), proof.end());
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string claim = "pid " + std::to_string(::getpid()) + " on " + host;
    message->insert(message->end(), claim.begin(), claim.begin() + std::min(claim.size(), kMaxClaimBytes));
    send_within(message, ps, 0);  // completed while the verdict is awaited
  }
  std::vector<std::uint8_t> reply(sizeof(std::int32_t));
  receive(&reply, "verdict on this worker's proof of the join secret");
  std::int32_t v = 0;
  std::memcpy(&v, reply.data(), sizeof v);
  if (v != kAdmitted)
    throw Error(kExitConfig, "the parameter server refused this worker: it did not prove the job's join secret "
                             "(give `join` the job's --join-secret, or the same --ckpt-dir / --port-file, whose "
                             "join-secret the job wrote)");
}

}  // namespace mt
