#include <exception>
#include <iostream>

#include "app/cli.hpp"
#include "core/error.hpp"

int main(int argc, char** argv) {
  try {
    return mt::run_cli(argc, argv, std::cout, std::cerr);
  } catch (const std::bad_alloc&) {
    std::cerr << "mpi_trainer: error: out of memory (lower --batch-size)\n";
  } catch (const std::exception& e) {
    std::cerr << "mpi_trainer: error: " << e.what() << '\n';
  }
  return mt::kExitInternal;
}
