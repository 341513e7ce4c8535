"""Fixtures for the workload tests: tiny synthetic models, scenario files written on the fly, three-backend runs.

OpenBLAS is loaded before the first mlx import (the root conftest does it too; this keeps the folder runnable on
its own).
"""

from app.models.blas import enable_openblas

enable_openblas()

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def gather_route_prefill():
    """The workload tests compare backends byte for byte (the same ops on the same shapes: prefill chunks gather
    their history as dense attends to its own), so they run the gather route. The paged prefill route (history
    read in place, log-sum-exp merge: other arithmetic) is held to a tolerance and identical tokens against it in
    test_paged_prefill.py, which switches it on per run. Session-scoped: module-scoped run fixtures run first."""
    from pool.prefill_decision import ENV_VAR

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENV_VAR, "0")
        yield


