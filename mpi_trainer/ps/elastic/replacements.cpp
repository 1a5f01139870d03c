#include "ps/elastic/replacements.hpp"
#include "ps/ps.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "ps/wire/mpi_env.hpp"

namespace mt {

struct WorkerSpawner::State {
  std::mutex mutex;
  std::condition_variable wake, idle;
  std::string program;
  std::vector<std::string> args;
  int limit = 0;
  int queued = 0;       // requested, not yet being spawned
  int outstanding = 0;  // requested, not yet taken
  int spawned = 0;      // spawns begun, in all
  int busy = 0;         // MPI_Comm_spawn calls under way
  bool stop = false;
  int failures = 0;  // in a row: after kMaxFailures no more spawns
  static constexpr int kMaxFailures = 3;
  std::string error;
  std::vector<MPI_Comm> comms;
  std::atomic<int> pending{0};
};

namespace {

// One of the threads: one MPI_Comm_spawn per request, one process each (a job of its own, whose
// MPI_Finalize waits for no other replacement), its result queued for the shard. `self` is this
// thread's own copy of MPI_COMM_SELF: the threads spawn at once (a takeover's refill of several
// slots takes one spawn's time, not one per slot), and concurrent collectives need distinct
// communicators.
void spawn_loop(std::shared_ptr<WorkerSpawner::State> s, MPI_Comm self) {
  std::vector<char*> argv;
  for (std::string& a : s->args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::unique_lock<std::mutex> lock(s->mutex);
  for (;;) {
    s->wake.wait(lock, [&] { return s->stop || s->queued > 0; });
    if (s->stop) break;
    --s->queued;
    ++s->busy;
    lock.unlock();
    MPI_Comm inter = MPI_COMM_NULL;
    int code = MPI_SUCCESS;
    int rc = MPI_Comm_spawn(s->program.c_str(), argv.data(), 1, MPI_INFO_NULL, 0, self, &inter, &code);
    if (rc == MPI_SUCCESS && code != MPI_SUCCESS) rc = code;
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    lock.lock();
    --s->busy;
    if (rc == MPI_SUCCESS) {
      s->failures = 0;
      s->comms.push_back(inter);
    } else {
      // A launcher without spawn (srun's PMI) or no slot free for it: said each time; after a few
      // in a row, no more tries in this run.
      ++s->failures;
      s->error = "MPI_Comm_spawn could not start a replacement worker (" + mpi_error_text(rc) + ")" +
                 (s->failures >= WorkerSpawner::State::kMaxFailures
                      ? ": " + std::to_string(s->failures) + " failures in a row, no more replacements in this run"
                      : std::string()) +
                 " (docs/fault-model.md, \"Replacement workers\")";
      --s->outstanding;
      if (s->failures >= WorkerSpawner::State::kMaxFailures) {
        s->outstanding -= s->queued;  // those queued behind it will not come either
        s->queued = 0;
      }
    }
    s->pending += 1;
    s->idle.notify_all();
  }
  s->idle.notify_all();
}

}  // namespace

WorkerSpawner::WorkerSpawner(std::string program, std::vector<std::string> args, int limit)
    : state_(std::make_shared<State>()) {
  state_->program = std::move(program);
  state_->args = std::move(args);
  state_->limit = limit;
  for (int i = 0; i < kThreads; ++i) {
    MPI_Comm self = MPI_COMM_NULL;
    MT_MPI(MPI_Comm_dup(MPI_COMM_SELF, &self));
    MT_MPI(MPI_Comm_set_errhandler(self, MPI_ERRORS_RETURN));  // a refusal is an error, not an abort
    std::thread(spawn_loop, state_, self).detach();  // see the destructor
  }
}

void WorkerSpawner::finish() {
  // The thread may be inside MPI_Comm_spawn, which cannot be interrupted: wait for it (a spawn
  // takes about a second), so that MPI_Finalize does not meet it; one that hangs is left behind.
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  state_->outstanding -= state_->queued;
  state_->queued = 0;
  state_->idle.wait_for(lock, std::chrono::seconds(15), [this] { return state_->busy == 0; });
}

bool WorkerSpawner::request(std::string* why_not) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->failures >= WorkerSpawner::State::kMaxFailures) {
    if (why_not) *why_not = "spawning failed " + std::to_string(state_->failures) + " times in a row before in this run";
    return false;
  }
  if (state_->spawned >= state_->limit) {
    if (why_not) *why_not = std::to_string(state_->limit) + " replacements started already (the limit)";
    return false;
  }
  ++state_->spawned;
  ++state_->queued;
  ++state_->outstanding;
  state_->wake.notify_all();
  return true;
}

bool WorkerSpawner::pending() const { return state_->pending.load() > 0; }

int WorkerSpawner::outstanding() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->outstanding;
}

std::vector<MPI_Comm> WorkerSpawner::take(std::string* error) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<MPI_Comm> comms;
  comms.swap(state_->comms);
  state_->outstanding -= static_cast<int>(comms.size());
  if (error && !state_->error.empty()) error->swap(state_->error);
  state_->pending = 0;
  return comms;
}

std::vector<std::string> replacement_arguments(const std::vector<std::string>& train_args) {
  std::vector<std::string> out;
  bool command = false;
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    const std::string& a = train_args[i];
    if (!command && a == "train") {
      out.emplace_back("join");
      command = true;
    } else if (a == "--revoke") {
      ++i;  // and its value
    } else if (a.rfind("--revoke=", 0) != 0) {
      out.push_back(a);
    }
  }
  return out;
}

MPI_Comm spawning_parameter_server() {
  MPI_Comm parent = MPI_COMM_NULL;
  if (MPI_Comm_get_parent(&parent) != MPI_SUCCESS) return MPI_COMM_NULL;
  return parent;
}

}  // namespace mt
