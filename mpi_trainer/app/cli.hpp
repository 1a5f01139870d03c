// The command line: `mpi_trainer train|model-info|gen-data ...`. Returns the process exit code.
#pragma once

#include <iosfwd>

namespace mt {

int run_cli(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace mt
