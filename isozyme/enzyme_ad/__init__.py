"""Enzyme-style automatic differentiation: activity analysis (`activity.py`), the derivative rule tables
(`rules.py`), preparation (`prepare.py`: inlining, returns, loop counters), reverse mode (`reverse.py`:
`diffe_<f>`) with cache (tape) planning (`cache.py`), forward mode (`forward.py`: `fwddiffe_<f>`), custom
rules and split mode (`custom.py`: `augmented_<f>`/`reverse_<f>`) and the pipelines (`gradient.py`).
May import: `isozyme.ssa`, `isozyme.optimize`."""
