// ps/wire/transport against a fake peer: this process itself over MPI_COMM_SELF (a singleton MPI, no
// launcher). Sends and receives with deadlines, a peer that never answers, shared payloads.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "ps/wire/mpi_env.hpp"
#include "ps/wire/transport.hpp"

using namespace mt;

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) return 1;
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  const int rc = Catch::Session().run(argc, argv);
  MPI_Finalize();
  return rc;
}

TEST_CASE("transport: a message to a peer arrives whole, within the deadline", "[mpi][ps]") {
  Buffer out(100), in(100);
  out.header() = MsgHeader{};
  out.header().kind = MsgKind::kPush;
  out.header().step = 77;
  out.header().payload = 100;
  for (int i = 0; i < 100; ++i)
    out.payload()[i] = 0.25f * static_cast<float>(i);
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  irecv(in, 0, kTagToPs, &rreq, MPI_COMM_SELF);
  isend(out, 100, 0, kTagToPs, &sreq, MPI_COMM_SELF);
  CHECK(wait_for(&rreq, 5.0));
  CHECK(wait_for(&sreq, 5.0));
  CHECK(check_header(in.header(), 100).empty());
  CHECK(in.header().step == 77);
  CHECK(in.payload()[99] == 0.25f * 99);
}

TEST_CASE("transport: a peer that never answers is noticed at the deadline, not before", "[mpi][ps][fault]") {
  Buffer in(10);
  MPI_Request rreq = MPI_REQUEST_NULL;
  irecv(in, 0, kTagHeartbeat, &rreq, MPI_COMM_SELF);
  const auto t = Clock::now();
  CHECK_FALSE(wait_for(&rreq, 0.2));
  const double waited = since(t);
  CHECK(waited >= 0.2);
  CHECK(waited < 1.0);
  // A receive may be cancelled (a send to a dead peer may not, docs/fault-model.md).
  MT_MPI(MPI_Cancel(&rreq));
  CHECK(wait_for(&rreq, 5.0));
}

TEST_CASE("transport: a shared payload travels outside the message, the header inside", "[mpi][ps]") {
  auto seg = ShmSegment::create(shm_bytes(50, 20));
  Buffer out(50), in(50);
  out.share(seg, 0);
  in.share(seg, 0);
  CHECK(out.count() == kHeaderFloats);
  CHECK(out.payload() == seg->floats());
  out.header() = MsgHeader{};
  out.header().kind = MsgKind::kPush;
  out.header().payload = 50;
  out.payload()[49] = 3.5f;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  irecv(in, 0, kTagToPs, &rreq, MPI_COMM_SELF);
  isend(out, 50, 0, kTagToPs, &sreq, MPI_COMM_SELF);
  REQUIRE(wait_for(&rreq, 5.0));
  REQUIRE(wait_for(&sreq, 5.0));
  CHECK(in.header().payload == 50);
  CHECK(in.payload()[49] == 3.5f);
  CHECK(shm_reply_offset(50) % 16 == 0);
  CHECK(shm_reply_offset(50) >= 50);
  seg->unlink();
}

TEST_CASE("shared memory: names left by dead processes are removed, live ones kept", "[mpi][ps][fault]") {
  // A worker killed between creating its segment and the shard mapping it leaves the name.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  REQUIRE(waitpid(child, nullptr, 0) == child);  // a pid that no longer exists
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string h(host);
  for (auto& c : h)
    if (c == '/' || c == '.') c = '_';
  const std::string dead = "/mt-ps-" + h.substr(0, 24) + "-" + std::to_string(child) + "-0-1";
  const std::string live = "/mt-ps-" + h.substr(0, 24) + "-" + std::to_string(getpid()) + "-99-1";
  for (const auto& n : {dead, live}) {
    const int fd = shm_open(n.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  CHECK(unlink_stale_segments() >= 1);
  CHECK(access(("/dev/shm" + dead).c_str(), F_OK) != 0);
  CHECK(access(("/dev/shm" + live).c_str(), F_OK) == 0);
  shm_unlink(live.c_str());
}

TEST_CASE("transport: backoff naps follow how long waits usually last", "[mpi][ps]") {
  Backoff b(10, 1000);
  CHECK(b.cap() == 1000);  // no history: the ceiling (the floor would spin through a long first wait)
  std::vector<long> naps;
  for (int i = 0; i < 9; ++i)
    naps.push_back(b.next(300));
  CHECK(naps == std::vector<long>{10, 20, 40, 80, 160, 300, 300, 300, 300});  // doubling, then the cap
  b.rearm();
  CHECK(b.next(300) == 10);
  b.restart();
  nap_microseconds(20000);
  b.done();  // a 20 ms wait: naps may grow to a tenth of it
  CHECK(b.cap() == Approx(2000).margin(1000));
  CHECK(b.cap() <= 1000);
}

TEST_CASE("MPI's TCP eager limit: raised to a message's size before MPI_Init, a user's setting kept", "[ps]") {
  // (MPI is initialised in this binary already: what is set here changes nothing of it.)
  const char* limit = "OMPI_MCA_btl_tcp_eager_limit";
  const char* fragment = "OMPI_MCA_btl_tcp_max_send_size";
  const auto env = [](const char* name) { return std::string(std::getenv(name) ? std::getenv(name) : ""); };
  // A message's bytes: its floats and header, and 4 KB for the library's headers, which the limit counts.
  const auto bytes = [](std::int64_t floats) { return std::to_string((floats + kHeaderFloats) * 4 + 4096); };
  unsetenv(limit);
  unsetenv(fragment);
  CHECK_FALSE(tcp_eager_up_to(15000));  // within Open MPI's own 64 KB
  CHECK(env(limit).empty());
  CHECK(tcp_eager_up_to(75326));  // resnet8's fp32 push: the limit and the fragment follow it
  CHECK(env(limit) == bytes(75326));
  CHECK(env(fragment) == bytes(75326));
  unsetenv(limit);
  unsetenv(fragment);
  CHECK(tcp_eager_up_to(15500));  // above the limit with the headers, below the 128 KB fragment: it stays
  CHECK(env(limit) == bytes(15500));
  CHECK(env(fragment) == "131072");
  unsetenv(limit);
  unsetenv(fragment);
  REQUIRE(setenv(fragment, "262144", 1) == 0);  // the user's choice of either keeps both as they are
  CHECK_FALSE(tcp_eager_up_to(1857722));
  CHECK(env(limit).empty());
  CHECK(env(fragment) == "262144");
  unsetenv(fragment);
  REQUIRE(setenv(limit, "65536", 1) == 0);
  CHECK_FALSE(tcp_eager_up_to(1857722));
  CHECK(env(limit) == "65536");
  CHECK(env(fragment).empty());
  unsetenv(limit);
}

namespace {
// A pair's doorbell block in memory shared with a forked child (as a segment is between processes).
struct SharedBells {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  SharedBells() { REQUIRE(mem != MAP_FAILED); }
  ~SharedBells() { munmap(mem, 4096); }
  SharedBells(const SharedBells&) = delete;
  SharedBells& operator=(const SharedBells&) = delete;
  PairBells bells() const { return PairBells{static_cast<std::uint32_t*>(mem)}; }
};
}  // namespace

TEST_CASE("doorbell: a ring before the sleep makes it return at once; none, the timeout", "[ps]") {
  SharedBells shm;
  const Doorbell bell = shm.bells().to_shard();
  const std::uint32_t seen = bell.seen();
  CHECK_FALSE(wait_bells(std::span(&bell, 1), std::span(&seen, 1), 2000));  // nothing rang: 2 ms
  bell.ring();
  CHECK(bell.seen() == seen + 1);
  CHECK(*shm.bells().to_worker().count == 0);  // the other direction is its own counter
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(wait_bells(std::span(&bell, 1), std::span(&seen, 1), 10000000));  // rang since `seen`: at once
  CHECK(since(t0) < 5);
  CHECK(*bell.sleeping == 0);  // lowered again after the sleep
}

TEST_CASE("doorbell: a ring from another process wakes a sleeper long before its timeout", "[ps]") {
  SharedBells shm;
  const Doorbell bell = shm.bells().to_worker();
  const std::uint32_t seen = bell.seen();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The sleeper: 30 s at most; woken by the parent's ring (exit 0) or not (exit 1).
    const auto t0 = std::chrono::steady_clock::now();
    const bool rang = wait_bells(std::span(&bell, 1), std::span(&seen, 1), 30000000);
    _exit(rang && since(t0) < 20 ? 0 : 1);
  }
  // Ring once the child sleeps (its flag is up); a ring before that also ends its sleep at once.
  const auto t0 = std::chrono::steady_clock::now();
  while (std::atomic_ref<std::uint32_t>(*bell.sleeping).load() == 0 && since(t0) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bell.ring();
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("doorbell: a sleeper on several doorbells wakes when any one rings", "[ps]") {
  if (!can_wait_on(2)) {
    WARN("this kernel has no futex_waitv (Linux 5.16): several doorbells fall back to naps");
    return;
  }
  SharedBells pairs[3];
  std::vector<Doorbell> bells;
  std::vector<std::uint32_t> seen;
  for (const auto& p : pairs) {
    bells.push_back(p.bells().to_shard());
    seen.push_back(bells.back().seen());
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::thread ringer([&] {
    while (std::atomic_ref<std::uint32_t>(*bells[2].sleeping).load() == 0 && since(t0) < 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    bells[2].ring();
  });
  CHECK(wait_bells(bells, seen, 30000000));
  CHECK(since(t0) < 20);
  ringer.join();
  CHECK(bells[0].seen() == seen[0]);
  CHECK(bells[2].seen() == seen[2] + 1);
}

TEST_CASE("doorbell: a polling loop's wait ends at a ring and looks again at once", "[ps]") {
  SharedBells shm;
  const Doorbell bell = shm.bells().to_shard();
  Backoff backoff(10, 1000);
  for (int i = 0; i < 4; ++i)
    backoff.next(1000);  // 10, 20, 40, 80 us: the next nap is 160
  BellWait wait;
  wait.clear();
  wait.add(bell);
  wait.add(Doorbell{});  // a peer without a doorbell (another node): naps stay at the backoff's cap
  wait.sleep(backoff);   // nothing rang: 160 us
  CHECK(backoff.next(1000) == 320);  // still growing
  wait.clear();
  wait.add(bell);  // the counter read before the test...
  bell.ring();     // ...and a message posted after it
  const auto t0 = std::chrono::steady_clock::now();
  wait.sleep(backoff);
  CHECK(since(t0) < 5);
  CHECK(backoff.next(1000) == 10);  // rearmed: the reply is there, the next look comes soon
}
