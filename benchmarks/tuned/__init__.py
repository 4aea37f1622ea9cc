"""Kernels rewritten by hand for one device: the `tuned` rows of the GPU benchmarks.

A benchmark's headline row is always `natural`, the kernel as a user writes it (the examples and the suite's
kernels, with only `prange` and documented `fastmath=` flags added). The kernels here compute the same
functions with layouts and loop structures chosen by a person for a GPU (a work item per (component, point)
pair, activations feature-major, one flat parameter vector); their rows are `tuned` and stand only beside the
natural row of the same problem. They stay because they are what the scheduling stage (`isozyme/schedule/`)
has to derive from the natural kernels, and the GPU conformance tests run them.

- `gmm_gpu_kernels`: ADBench's GMM objective, a work item per (component, point) pair (`gmm_gpu.py`);
- `transformer_gpu_kernels`: `examples/transformer.py` with every stage a parallel loop over (feature, token)
  pairs (`transformer_training.py --variants pairs`);
- `mlp_gpu_kernels`: the MLP's stages as `prange`s over (feature, sample) pairs (`mlp_gpu.py`).
"""
