// What does not need MPI itself (see comm.h).
#include "runtime/comm/comm.h"

#include <cstdlib>

namespace mt::runtime {

bool launchedByMpi() {
  // Open MPI's mpirun, and the PMI/PMIx launchers (MPICH's, Slurm's).
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

} // namespace mt::runtime
