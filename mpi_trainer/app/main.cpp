#include <exception>
#include <iostream>

#include "app/cli.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  try {
    return mt::run_cli(argc, argv, std::cout, std::cerr);
  } catch (...) {
    const mt::ErrorReport e = mt::describe_error(std::current_exception());
    std::cerr << "mpi_trainer: error: " << e.what << '\n';
    return e.exit_code;
  }
}
