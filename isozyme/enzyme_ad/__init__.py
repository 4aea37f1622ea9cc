"""Enzyme-style automatic differentiation: activity analysis (`activity.py`: which values and arrays the
derivative carries, from the argument activities), and, not built yet, the derivative rule table, reverse
mode (`diffe_<f>`, `augmented_<f>`/`reverse_<f>`), forward mode (`fwddiffe_<f>`) and cache (tape) planning.
May import: `isozyme.ssa`, `isozyme.optimize`."""
