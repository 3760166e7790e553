"""XLA's flags and compilation cache for every test process, this one and the commands the
tests start.

The tests' programs are tiny and run for milliseconds; XLA's CPU backend optimisation took
most of their time in compiling. Unoptimised code computes the same float32 operations, and
every run a test compares with another compiles under the same flags, so bit-for-bit checks
still compare like with like.

One persistent compilation cache serves the whole test run, its pytest-xdist workers and the
commands they start (the run's id names it): a program compiled in one test file, or by one
command, is loaded in any later one instead of compiled again. A loaded program is the one
XLA compiled from the same module under the same options, so results do not change.
"""

import os
import tempfile

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

COMPILATION_CACHE = os.path.join(
    tempfile.gettempdir(),
    f"xlnet-test-xla-cache-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}",
)
