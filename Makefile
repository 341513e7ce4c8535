# The README's two commands: `make run` (the TUI) and `make test` (the test suite).
# Both create/refresh .venv first via .ci/bootstrap. `make test` runs the suite on this machine's BLAS (OpenBLAS's
# own kernel choice, or OPENBLAS_CORETYPE if exported) on two pytest-xdist workers (each module's tests on one
# worker, so a module's fixtures are built once; no test bounds time, so a loaded machine only makes it slower), then
# the numerics tests (pytest -m numerics, the fast ones) again under OpenBLAS's generic Prescott kernels and under
# MLX's reference BLAS: byte-identity must hold on every BLAS kernel (docs/testing.md, "Numerics"). `make fuzz`: the
# fuzz suites at SLABSCOPE_FUZZ_SCALE (default 20)
# times their CI size, printing the outcome counts by class. `make mutate`: mutation testing (docs/testing.md).
.PHONY: run test venv fuzz mutate
venv:
	@bash .ci/bootstrap
run: venv
	@.venv/bin/slabscope
NUMERICS = -m "numerics and not slow" tests/workloads tests/models
BLAS_LINE = .venv/bin/python -c "from app.models.blas import enable_openblas; print(enable_openblas())"
test: venv
	@echo "the suite on $$($(BLAS_LINE))"
	@.venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadscope
	@if [ "$${OPENBLAS_CORETYPE:-}" != Prescott ]; then echo "numerics on $$(OPENBLAS_CORETYPE=Prescott $(BLAS_LINE))"; \
		OPENBLAS_CORETYPE=Prescott .venv/bin/python -m pytest -q -p no:cacheprovider $(NUMERICS); fi
	@echo "numerics on $$(SLABSCOPE_BLAS=reference $(BLAS_LINE))"
	@SLABSCOPE_BLAS=reference .venv/bin/python -m pytest -q -p no:cacheprovider $(NUMERICS)
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
