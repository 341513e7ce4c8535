# The README's two commands: `make run` (the TUI) and `make test` (the test suite).
# Both create/refresh .venv first via .ci/bootstrap.
.PHONY: run test venv
venv:
	@bash .ci/bootstrap
run: venv
	@.venv/bin/slabscope
test: venv
	@.venv/bin/python -m pytest -q -p no:cacheprovider
