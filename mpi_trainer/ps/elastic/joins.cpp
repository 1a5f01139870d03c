#include "ps/elastic/joins.hpp"
#include "ps/options.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "ps/elastic/join_auth.hpp"
#include "ps/resilience/notices.hpp"
#include "ps/wire/mpi_env.hpp"
#include "ps/wire/transport.hpp"

namespace mt {

struct JoinListener::Queue {
  std::mutex mutex;
  std::vector<MPI_Comm> comms;
  std::vector<std::string> refused;
  std::atomic<int> pending{0};
  std::string port;
  std::string secret;
  double auth_seconds = kJoinAuthSeconds;
  std::string error;
};

namespace {

void accept_joins(std::shared_ptr<JoinListener::Queue> q) {
  std::vector<char> port(q->port.begin(), q->port.end());
  port.push_back('\0');
  for (;;) {
    MPI_Comm inter = MPI_COMM_NULL;
    const int rc = MPI_Comm_accept(port.data(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    std::string refused;
    if (rc == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
      // A refused connection is left as it is: disconnecting is collective (docs/fault-model.md).
      refused = authenticate_joiner(inter, q->secret, q->auth_seconds);
    }
    std::lock_guard<std::mutex> lock(q->mutex);
    if (rc != MPI_SUCCESS) {
      q->error = "MPI_Comm_accept failed (error " + std::to_string(rc) + "): no more joins";
      q->pending += 1;
      return;
    }
    if (refused.empty()) {
      q->comms.push_back(inter);
    } else {
      q->refused.push_back(std::move(refused));
    }
    q->pending += 1;
  }
}

}  // namespace

JoinListener::JoinListener(const std::string& port_file, const std::string& about_json, std::string secret,
                           double auth_seconds)
    : queue_(std::make_shared<Queue>()) {
  queue_->secret = std::move(secret);
  queue_->auth_seconds = auth_seconds;
  char port[MPI_MAX_PORT_NAME] = {};
  MT_MPI(MPI_Open_port(MPI_INFO_NULL, port));
  queue_->port = port;
  std::error_code ec;
  create_private_directories(std::filesystem::path(port_file).parent_path(), ec);  // else the write says why
  nlohmann::ordered_json j{{"port", queue_->port}, {"pid", static_cast<long>(getpid())}};
  const auto about = nlohmann::ordered_json::parse(about_json);  // named: items() refers into it
  for (const auto& [k, v] : about.items())
    j[k] = v;
  write_file_atomically(port_file, j.dump() + '\n');
  std::thread(accept_joins, queue_).detach();
}

bool JoinListener::pending() const { return queue_->pending.load() > 0; }

std::vector<MPI_Comm> JoinListener::take(std::vector<std::string>* refused, std::string* error) {
  std::vector<MPI_Comm> comms;
  std::lock_guard<std::mutex> lock(queue_->mutex);
  comms.swap(queue_->comms);
  if (refused) refused->swap(queue_->refused);
  if (error) error->swap(queue_->error);
  queue_->pending = 0;
  return comms;
}

MPI_Comm connect_to_parameter_server(const std::string& file, const std::string& secret_file, bool prove) {
  std::string port;
  for (const auto t0 = Clock::now();; nap_microseconds(100000)) {
    if (notice_signal()) return MPI_COMM_NULL;
    std::ifstream in(file);
    nlohmann::json j;
    if (in && (in >> j) && j.contains("port")) {
      port = j["port"].get<std::string>();
      break;
    }
    if (since(t0) > 60)
      throw Error(kExitPsLost, file +
                                   ": no port file from a parameter server within 60 s (is the job running with "
                                   "--max-workers and this --ckpt-dir / --port-file?)");
  }
  // Written before the port file: a missing or unsafe one is the joiner's mistake, said before connecting.
  const std::string secret = read_join_secret(secret_file);
  // One connection at a time. A connection that does not complete means no parameter server.
  const std::string lock_path = file + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, kPrivateFileMode);
  MT_CHECK_POSIX(lock >= 0);
  while (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    MT_CHECK_POSIX(errno == EWOULDBLOCK || errno == EINTR);
    if (notice_signal()) {
      ::close(lock);
      return MPI_COMM_NULL;
    }
    nap_microseconds(20000);
  }
  // MPI_Comm_connect blocks and cannot be interrupted: a watchdog ends the process when no
  // parameter server answers, or when a notice arrives meanwhile (this worker has not joined:
  // nothing is lost). With MpiSession::finalize's watchdog, the only exits outside main: the last
  // resort a blocking MPI call forces.
  std::atomic<bool> connected{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 600 && !connected; ++i) {
      if (const int sig = notice_signal(); sig && !connected) {
        std::cerr << "mpi_trainer join: " << signal_name(sig) << " while connecting: leaving before joining; exit "
                  << kExitOk << '\n'
                  << std::flush;
        std::_Exit(kExitOk);
      }
      nap_microseconds(100000);
    }
    if (connected) return;
    std::cerr << "mpi_trainer join: no parameter server answered at the port in " << file << " within 60 s; exit "
              << kExitPsLost << '\n'
              << std::flush;
    std::_Exit(kExitPsLost);
  });
  MPI_Comm ps = MPI_COMM_NULL;
  std::vector<char> p(port.begin(), port.end());
  p.push_back('\0');
  MT_MPI(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));  // a stale or bad port is an error, not an abort
  const int rc = MPI_Comm_connect(p.data(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &ps);
  connected = true;
  watchdog.join();
  const auto unlock = [lock] {
    ::flock(lock, LOCK_UN);
    ::close(lock);
  };
  if (rc != MPI_SUCCESS) {
    unlock();
    throw Error(kExitPsLost, "cannot connect to the parameter server at the port in " + file + " (" +
                                 mpi_error_text(rc) +
                                 "): is the job running, and were both started with the same --ompi-server?");
  }
  try {  // the handshake under the lock too: the accept thread serves one joiner at a time
    MT_MPI(MPI_Comm_set_errhandler(ps, MPI_ERRORS_RETURN));
    prove_join_secret(ps, secret, prove, kJoinAuthSeconds + 20);
  } catch (...) {
    unlock();
    throw;
  }
  unlock();
  return ps;
}

}  // namespace mt
