// `mpi_trainer report`: a run's story in one HTML page (docs/user-guide.md, "See a run"). The
// report itself is Python (mpi_trainer/report/report.py, matplotlib): this starts it with the
// arguments after `report`, so the tool has one entry point.
#pragma once

#include <ostream>

namespace mt {

// `mpi_trainer report ARGS...`: replaces this process with `PYTHON report.py ARGS...` (PYTHON:
// $MT_PYTHON, else /usr/bin/python3, Debian's with matplotlib). Returns only when that cannot
// start: exit 3, after one line on `err` saying what to install.
int report_command(int argc, char** argv, std::ostream& err);

}  // namespace mt
