"""Enzyme-style automatic differentiation (not built yet): activity analysis, the derivative rule table,
reverse mode (`diffe_<f>`, `augmented_<f>`/`reverse_<f>`), forward mode (`fwddiffe_<f>`) and cache (tape)
planning. May import: `isozyme.ssa`, `isozyme.optimize`."""
