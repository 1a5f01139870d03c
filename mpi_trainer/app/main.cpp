#include <unistd.h>

#include <exception>
#include <iostream>

#include "app/cli.hpp"
#include "core/error.hpp"
#include "core/line_output.hpp"

int main(int argc, char** argv) {
  // Every line leaves in one write: under mpirun, ranks' lines do not cut into each other.
  const mt::LineOutput out(std::cout, STDOUT_FILENO);
  const mt::LineOutput err(std::cerr, STDERR_FILENO);
  try {
    return mt::run_cli(argc, argv, std::cout, std::cerr);
  } catch (...) {
    const mt::ErrorReport e = mt::describe_error(std::current_exception());
    std::cerr << "mpi_trainer: error: " << e.what << '\n';
    return e.exit_code;
  }
}
