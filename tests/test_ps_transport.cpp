// ps/transport against a fake peer: this process itself over MPI_COMM_SELF (a singleton MPI, no
// launcher). Sends and receives with deadlines, a peer that never answers, shared payloads.
#include <fcntl.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "ps/mpi_env.hpp"
#include "ps/transport.hpp"

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
  CHECK(b.cap() == 10);  // no history: the floor
  nap_microseconds(20000);
  b.done();  // a 20 ms wait: naps may grow to a tenth of it
  CHECK(b.cap() == Approx(2000).margin(1000));
  CHECK(b.cap() <= 1000);
}
