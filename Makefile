# The README's two commands: `make run` (the TUI) and `make test` (the test suite).
# Both create/refresh .venv first via .ci/bootstrap. `make fuzz`: the fuzz suites at SLABSCOPE_FUZZ_SCALE (default 20)
# times their CI size, printing the outcome counts by class.
.PHONY: run test venv fuzz
venv:
	@bash .ci/bootstrap
run: venv
	@.venv/bin/slabscope
test: venv
	@.venv/bin/python -m pytest -q -p no:cacheprovider
fuzz: venv
	@SLABSCOPE_FUZZ_SCALE=$${SLABSCOPE_FUZZ_SCALE:-20} .venv/bin/python -m pytest -q -s -p no:cacheprovider \
		tests/pool/test_pool_fuzz.py
