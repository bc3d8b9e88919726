"""Golden values: fixed-key computations of every capability, recorded per platform."""
