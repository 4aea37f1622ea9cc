"""Enzyme-style automatic differentiation: activity analysis (`activity.py`), the derivative rule tables
(`rules.py`), preparation (`prepare.py`: inlining, returns, loop counters), reverse mode (`reverse.py`:
`diffe_<f>`) with cache (tape) planning (`cache.py`), forward mode (`forward.py`: `fwddiffe_<f>`), custom
and split-mode call rules (`custom.py`) and the pipelines (`gradient.py`). Split mode with explicit tapes
(`augmented_<f>`/`reverse_<f>`) is not built yet. May import: `isozyme.ssa`, `isozyme.optimize`."""
