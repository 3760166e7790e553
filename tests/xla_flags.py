"""XLA's flags for every test process, this one and the commands the tests start.

The tests' programs are tiny and run for milliseconds; XLA's CPU backend optimisation took
most of their time in compiling. Unoptimised code computes the same float32 operations, and
every run a test compares with another compiles under the same flags, so bit-for-bit checks
still compare like with like.
"""

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
