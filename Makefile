# The README's two commands: `make run` (the TUI) and `make test` (the test suite).
# Both create/refresh .venv first via .ci/bootstrap.
.PHONY: run test venv mutate
venv:
	@bash .ci/bootstrap
run: venv
	@.venv/bin/slabscope
test: venv
	@.venv/bin/python -m pytest -q -p no:cacheprovider

# Mutation testing (docs/testing.md). MUTATE: mutant name globs (module paths with dots); default: the modules
# whose figures slabscope prints. Two workers: the machine is shared. Results stay in mutants/ (git-ignored).
MUTATE ?= pool.copy_meter* pool.free_rows* pool.gather_runs* pool.stats* probes.sampler* pool.snapshot* \
	pool.book_rows* pool.book_integrity* probes.compare* probes.whatif* app.tui.analysis* app.tui.data*
mutate: venv
	@.venv/bin/mutmut run --max-children 2 $(MUTATE); .venv/bin/mutmut results | grep -v "not checked"
