"""Builds the native part of the Python package with the project's CMake.

pyproject.toml holds the metadata; this only adds the build step:
configure and build the `ckpt_python` target, whose output directory
(build/integrations/python/ckpt) is a complete package: the module
`_ckpt`, the `libckpt` it loads from its own directory ($ORIGIN), and the
Python files. CKPT_CMAKE_BUILD_DIR names an existing configured build tree
to build in (no second compile of the library); otherwise a private one is
made under build/python-wheel. CMAKE_BUILD_PARALLEL_LEVEL sets the jobs.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("CKPT_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build", "python-wheel", "cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            os.makedirs(build_dir, exist_ok=True)
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                "-DCKPT_BUILD_TESTS=OFF", "-DCKPT_BUILD_BENCHMARKS=OFF", "-DCKPT_BUILD_TOOLS=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}",
            ])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "ckpt_python"])
        package = os.path.join(build_dir, "integrations", "python", "ckpt")
        out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(out, exist_ok=True)
        natives = glob.glob(os.path.join(package, "_ckpt*.so")) + glob.glob(os.path.join(package, "libckpt.so*")) + \
            glob.glob(os.path.join(package, "libckpt_coordinator.so*"))
        if not any(os.path.basename(n).startswith("_ckpt") for n in natives):
            raise RuntimeError(f"the build left no _ckpt module in {package}")
        for f in natives:
            shutil.copyfile(f, os.path.join(out, os.path.basename(f)))
        # The module's file name the wheel expects.
        built = [n for n in natives if os.path.basename(n).startswith("_ckpt")][0]
        target = self.get_ext_fullpath(ext.name)
        if os.path.abspath(target) != os.path.join(out, os.path.basename(built)):
            shutil.copyfile(built, target)


setup(
    ext_modules=[CMakeExtension("ckpt._ckpt")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.join("build", "python-wheel")},
             "egg_info": {"egg_base": os.path.join("build", "python-wheel")}},
)
