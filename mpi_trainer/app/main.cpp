#include <unistd.h>

#include <exception>
#include <iostream>

#include "app/cli.hpp"
#include "core/error.hpp"
#include "core/line_output.hpp"
#include "ps/wire/mpi_env.hpp"

int main(int argc, char** argv) {
  // Every line leaves in one write: under mpirun, ranks' lines do not cut into each other.
  const mt::LineOutput out(std::cout, STDOUT_FILENO);
  const mt::LineOutput err(std::cerr, STDERR_FILENO);
  try {
    const int code = mt::run_cli(argc, argv, std::cout, std::cerr);
    if (mt::mpi_left_unfinalized()) {
      // MPI was left without MPI_Finalize (a lost parameter server, a takeover): requests to the
      // dead are still posted, so no destructor of the MPI library may run. Every process that
      // ends so ends here.
      std::cout << std::flush;
      std::cerr << std::flush;
      std::_Exit(code);
    }
    return code;
  } catch (...) {
    const mt::ErrorReport e = mt::describe_error(std::current_exception());
    std::cerr << "mpi_trainer: error: " << e.what << '\n';
    return e.exit_code;
  }
}
