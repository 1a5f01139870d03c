// Join authentication (issue 45, ps/elastic/join_auth.hpp): the HMAC against RFC 4231, the proof a joiner
// sends, and the rules for the secret file. The handshake over MPI is tested with real joiners in
// tests/test_fault_elastic.sh.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "ps/elastic/join_auth.hpp"
#include "test_util.hpp"

using namespace mt;
namespace fs = std::filesystem;

namespace {
std::span<const std::uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}
std::string hex(const Sha256& h) {
  std::string s;
  for (const std::uint8_t b : h) {
    static constexpr char d[] = "0123456789abcdef";
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}
void write(const fs::path& p, const std::string& content, fs::perms mode) {
  std::ofstream(p) << content;
  fs::permissions(p, mode);
}
}  // namespace

TEST_CASE("join auth: HMAC-SHA256 is RFC 4231's", "[unit][ps]") {
  // RFC 4231, test case 2.
  CHECK(hex(hmac_sha256(bytes("Jefe"), bytes("what do ya want for nothing?"))) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1: a 20-byte key of 0x0b.
  CHECK(hex(hmac_sha256(bytes(std::string(20, '\x0b')), bytes("Hi There"))) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST_CASE("join auth: only the secret's holder answers a nonce right", "[unit][ps]") {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  const std::string nonce = random_bytes(kJoinNonceBytes);
  CHECK(random_bytes(kJoinNonceBytes) != nonce);  // fresh each time
  const Sha256 proof = join_proof(secret, bytes(nonce));
  CHECK(join_proof_matches(secret, bytes(nonce), proof));
  CHECK_FALSE(join_proof_matches(secret + "x", bytes(nonce), proof));          // another secret
  CHECK_FALSE(join_proof_matches(secret, bytes(random_bytes(kJoinNonceBytes)), proof));  // a replay
  Sha256 flipped = proof;
  flipped[31] ^= 1;
  CHECK_FALSE(join_proof_matches(secret, bytes(nonce), flipped));
  CHECK_FALSE(join_proof_matches(secret, bytes(nonce), std::span(proof).first(16)));  // short
  CHECK_FALSE(join_proof_matches(secret, bytes(nonce), {}));
  // Bound to the protocol's label: not the plain HMAC of the nonce.
  CHECK(proof != hmac_sha256(bytes(secret), bytes(nonce)));
}

TEST_CASE("join auth: the secret file is created private, kept, and checked", "[unit][ps]") {
  test::TempDir dir("join_secret");
  const fs::path port = dir.path() / "ck" / "ps-port";
  const fs::path path = default_join_secret_path(port);
  CHECK(path == dir.path() / "ck" / "join-secret");

  const std::string made = load_or_create_join_secret(path);  // its directory is created too
  CHECK(made.size() == 64);  // 32 random bytes, hex
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat(path.parent_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(load_or_create_join_secret(path) == made);  // kept across restarts
  CHECK(read_join_secret(path) == made);

  const fs::path mine = dir.path() / "mine";
  write(mine, "a secret of my own, 30 bytes\n\n", fs::perms::owner_read);  // 0400, whitespace trimmed
  CHECK(read_join_secret(mine) == "a secret of my own, 30 bytes");
  CHECK(load_or_create_join_secret(mine) == "a secret of my own, 30 bytes");

  const auto refused = [](const fs::path& p, const std::string& says) {
    try {
      read_join_secret(p);
      FAIL("accepted " << p);
    } catch (const Error& e) {
      CHECK(e.exit_code() == kExitConfig);
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  write(mine, "a secret of my own, 30 bytes", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  refused(mine, "can be read by others (mode 640): run chmod 600");
  CHECK_THROWS_AS(load_or_create_join_secret(mine), Error);  // not replaced behind the user's back
  write(mine, "short secret\n", fs::perms::owner_read | fs::perms::owner_write);
  refused(mine, "holds 12 bytes, fewer than 16");
  refused(dir.path() / "none", "cannot read the join secret");
  refused(dir.path(), "is not a file");
}
