"""Hand-written kernels for the tests: `constructs` covers the kernel language one construct at a time."""
