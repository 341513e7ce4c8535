"""One widget per module; each renders plain data handed to it by a view (no store access of its own)."""
