"""slabscope's application layer: the CLI, the Textual TUI and the live workloads (worker processes)."""
