# lit configuration for mt: IR tests (mt-opt) and tool tests (mtc).
import os
import shutil
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "mt"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mt_obj_root, "test")

config.substitutions.append(("%mt_src", config.mt_src_root))
# The build tree, where generated sources (the Sched kernels' .td) are.
config.substitutions.append(("%mt_obj", config.mt_obj_root))
# The built tools, for what finds them itself (the Python package: MT_BIN).
config.substitutions.append(("%mt_bin", config.mt_tools_dir))
config.substitutions.append(("%mlir_include", " ".join("-I " + d for d in config.mlir_include_dirs)))
# The committed fixtures, unpacked by the build (test/CMakeLists.txt).
config.substitutions.append(("%fixtures", os.path.join(config.mt_obj_root, "test", "fixtures")))
# Fixtures shared by the project live beside the repository.
shared = os.environ.get("MT_SHARED", os.path.join(config.mt_src_root, "..", "shared"))
config.substitutions.append(("%shared", os.path.abspath(shared)))
if os.path.isdir(os.path.join(shared, "fixtures")):
    config.available_features.add("shared-fixtures")
config.substitutions.append(("%python", "/usr/bin/python3"))
# lit itself, for the test of this configuration.
config.substitutions.append(("%lit", sys.executable + " " + os.path.abspath(sys.argv[0])))
# The export venv (scripts/export-venv.sh: pinned torch and transformers)
# runs the tests against the real client; MT_TORCH_PYTHON names another.
torch_python = os.environ.get(
    "MT_TORCH_PYTHON", os.path.join(config.mt_src_root, ".venv-export", "bin", "python"))
if os.access(torch_python, os.X_OK):
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", torch_python))
# mtrun built with MPI, and mpirun (Open MPI: scripts/bootstrap.sh installs
# both) run the data-parallel tests: as root too (CI is), on more ranks than
# cores where the machine has few.
mpirun = shutil.which("mpirun")
if config.mt_have_mpi and mpirun:
    config.available_features.add("mpi")
    config.substitutions.append(
        ("%mpirun", mpirun + " --oversubscribe --allow-run-as-root"))
# clang-format (scripts/bootstrap.sh installs it) checks that .td prose is
# left alone.
if shutil.which("clang-format"):
    config.available_features.add("clang-format")
# rsvg-convert (librsvg2-bin; scripts/bootstrap.sh installs it) renders the
# schedule pictures that test/inspect/svg.test checks.
if shutil.which("rsvg-convert"):
    config.available_features.add("rsvg")
# Under CI (CI=true) nothing may be skipped for want of what the set-up
# provides: a test reported unsupported there is a test that did not run.
if os.environ.get("CI") == "true":
    provides = {
        "shared-fixtures": f"{os.path.abspath(shared)}/fixtures (check out ../shared beside the repository, or set MT_SHARED)",
        "torch": f"{torch_python} (scripts/export-venv.sh, or set MT_TORCH_PYTHON)",
        "mpi": "mtrun built with MPI and mpirun (scripts/bootstrap.sh)",
        "clang-format": "clang-format (scripts/bootstrap.sh)",
        "rsvg": "rsvg-convert (librsvg2-bin; scripts/bootstrap.sh)",
    }
    missing = [why for feature, why in provides.items()
               if feature not in config.available_features]
    if missing:
        lit_config.fatal("CI=true, and the tests that need these would be "
                         "skipped: " + "; ".join(missing))

llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()
tool_dirs = [config.mt_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["mt-opt", "mtc", "mtrun", "mt-inspect", "FileCheck", "not", "count", "mlir-tblgen", "mt-bench-adamw"], tool_dirs)
