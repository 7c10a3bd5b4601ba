"""Build the simulator's C event loop (optional: without a C compiler autoplace falls back to numba)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("autoplace.sim._csim", ["src/autoplace/sim/_csim.c"],
                             extra_compile_args=["-O3", "-std=c99"], optional=True)])
