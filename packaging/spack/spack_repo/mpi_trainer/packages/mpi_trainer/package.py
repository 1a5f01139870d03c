# Spack recipe of mpi_trainer (packaging/spack/README.md: how a site uses it, what was checked).
import re

from spack_repo.builtin.build_systems.cmake import CMakePackage, generator
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class MpiTrainer(CMakePackage, CudaPackage):
    """Trains deep networks (ResNet on CIFAR-10 or Fashion-MNIST) cheaply on preemptible
    servers: a C++20 batch tool with a CPU backend on oneDNN, an optional CUDA/cuDNN backend,
    an asynchronous parameter server over MPI, durable HDF5 checkpoints, recovery from revoked
    workers and a lost parameter server (heartbeats, or ULFM with +ulfm), and Slurm templates
    that checkpoint, requeue and resume on preemption. `mpi_trainer report` also needs python3
    with matplotlib at run time."""

    # No public homepage or download site yet. The source tarball is made from a checkout with
    #   git archive --format=tar.gz --prefix=mpi_trainer-0.1.0/ -o mpi_trainer-0.1.0.tar.gz HEAD
    # and handed to Spack through a source mirror (README.md); `spack develop` builds a checkout.
    homepage = "https://example.invalid/mpi_trainer"
    url = "https://example.invalid/mpi_trainer/mpi_trainer-0.1.0.tar.gz"

    # The tarball of commit 27fbd33f1d0111f741415db3dbe641b04b176f27 (git archive, above): every
    # commit makes another tarball; a release pins the one of its tag here.
    version("0.1.0", sha256="57bd31a2e695e92ca4858bdf87eec94be81a80eb4150e275817de6dd00349991")

    generator("ninja")

    variant(
        "ulfm",
        default=False,
        description="Failed ranks reported by the MPI library (ULFM, Open MPI 5) besides "
        "heartbeats; -DMT_ULFM=ON fails the configuration when the library's probe fails",
    )
    # +cuda, cuda_arch=... come from CudaPackage.

    depends_on("c", type="build")
    depends_on("cxx", type="build")
    # C++20; built and tested with GCC 12 (Debian 12).
    conflicts("%gcc@:10", msg="mpi_trainer is C++20: GCC 11 or newer")

    depends_on("cmake@3.22:", type="build")

    depends_on("mpi")
    # ULFM: Open MPI 5 compiles it in by default, except against an external PRRTE built without
    # resilience, where its configure only warns and leaves ULFM out. Spack's openmpi builds an
    # external PRRTE unless +internal-pmix, so +ulfm asks for the internal PMIx and PRRTE. Their
    # libpmix and pmix.h then sit in Open MPI's own prefix, where cmake/ULFMProbe.cmake looks.
    depends_on("openmpi@5: +internal-pmix", when="+ulfm")

    depends_on("hdf5@1.10:")  # C API only; +mpi is not needed (either works)
    depends_on("onednn@2")  # the 2.x API (operation descriptors, removed in oneDNN 3.0)
    depends_on("zlib-api")
    depends_on("openssl@3")  # libcrypto: the join handshake's HMAC
    depends_on("cli11@2:")
    depends_on("nlohmann-json@3")
    depends_on("catch2@2", type="test")  # spack install --test=root

    # cuda_arch=none (the default) builds the project's list (cmake/MtCuda.cmake: sm_75 to sm_100
    # and sm_100 PTX, which needs CUDA 12.8 or newer); CudaPackage already keeps Volta
    # (cuda_arch=70) off CUDA 13.
    with when("+cuda"):
        depends_on("cuda@12:")
        depends_on("cudnn@9:")  # built and tested with cuDNN 9 (9.19 beside CUDA 13.0)
        conflicts(
            "cuda_arch=none",
            when="^cuda@:12.7",
            msg="the project's default GPU list ends at sm_100, which needs CUDA 12.8: "
            "set cuda_arch (e.g. cuda_arch=80)",
        )

    def _cpu_arch(self):
        """MT_CPU_ARCH, the -march= of the CPU kernels: the spec's target as the compiler spells
        it (the compiler wrapper gives the same target to every other file), never 'native'."""
        try:
            flags = microarchitecture_flags(self.spec, "cxx")
        except (NameError, ValueError):  # Spack without it, or an unknown compiler/target pair
            flags = ""
        match = re.search(r"-march=(\S+)", flags)
        if match:
            return match.group(1)
        baseline = {"x86_64": "x86-64", "aarch64": "armv8-a"}
        return baseline.get(str(self.spec.target.family), "native")

    def cmake_args(self):
        spec = self.spec
        args = [
            self.define("MT_WITH_CUDA", spec.satisfies("+cuda")),
            self.define("MT_ULFM", spec.satisfies("+ulfm")),
            self.define("MT_CPU_ARCH", self._cpu_arch()),
            self.define("MT_BUILD_TESTS", self.run_tests),
            self.define("MT_BUILD_BENCH", False),
            self.define("MT_CCACHE", False),  # Spack's own ccache setting, not the project's
            # As the release preset builds: fewer, larger translation units.
            self.define("CMAKE_UNITY_BUILD", True),
            self.define("CMAKE_UNITY_BUILD_BATCH_SIZE", 6),
            self.define("MPI_C_COMPILER", spec["mpi"].mpicc),
            self.define("MPI_CXX_COMPILER", spec["mpi"].mpicxx),
        ]
        if spec.satisfies("+cuda"):
            nvcc = join_path(spec["cuda"].prefix.bin, "nvcc")
            args.append(self.define("CMAKE_CUDA_COMPILER", nvcc))
            args.append(self.define("CUDAToolkit_ROOT", spec["cuda"].prefix))
            args.append(self.define("CUDNN_ROOT", spec["cudnn"].prefix))
            cuda_arch = spec.variants["cuda_arch"].value
            if "none" not in cuda_arch:
                args.append(self.define("CMAKE_CUDA_ARCHITECTURES", ";".join(cuda_arch)))
            # else: the project's list (cmake/MtCuda.cmake: sm_75 ... sm_100 and sm_100 PTX)
        return args

    sanity_check_is_file = [join_path("bin", "mpi_trainer")]

    def test_version(self):
        """mpi_trainer --version names this version, the MPI library and the failure detection"""
        exe = which(self.prefix.bin.mpi_trainer)
        out = exe("--version", output=str.split, error=str.split)
        check_outputs([f"mpi_trainer {self.spec.version}", "failure detection:"], out)
        if self.spec.satisfies("+ulfm"):
            check_outputs(["ULFM"], out)
