# The README's two commands: `make run` (the TUI) and `make test` (the test suite).
# Both create/refresh .venv first via .ci/bootstrap. `make fuzz`: the fuzz suites at SLABSCOPE_FUZZ_SCALE (default 20)
# times their CI size, printing the outcome counts by class. `make mutate`: mutation testing (docs/testing.md).
.PHONY: run test venv fuzz mutate
venv:
	@bash .ci/bootstrap
run: venv
	@.venv/bin/slabscope
test: venv
	@.venv/bin/python -m pytest -q -p no:cacheprovider
fuzz: venv
	@SLABSCOPE_FUZZ_SCALE=$${SLABSCOPE_FUZZ_SCALE:-20} .venv/bin/python -m pytest -q -s -p no:cacheprovider \
		tests/pool/test_pool_fuzz.py tests/probes/test_recording_fuzz.py \
		tests/tui/test_hostile_recordings.py::test_randomly_damaged_recordings_never_stop_the_dashboard

# MUTATE: mutant name globs (module paths with dots); default: the modules whose figures slabscope prints. Two
# workers: the machine is shared. Results stay in mutants/ (git-ignored); `mutmut show NAME` prints a mutant.
MUTATE ?= pool.copy_meter* pool.free_rows* pool.gather_runs* pool.stats* probes.sampler* pool.snapshot* \
	pool.book_rows* pool.book_integrity* probes.figures* probes.compare* probes.whatif* app.tui.analysis* app.tui.data*
mutate: venv
	@.venv/bin/mutmut run --max-children 2 $(MUTATE); .venv/bin/mutmut results | grep -v "not checked"
