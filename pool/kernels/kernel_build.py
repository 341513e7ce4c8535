"""What the CUDA and Metal paged-decode modules share when they build kernel objects: the slab input names, a
source hash in every kernel name (MLX caches compiled kernels by name, so a changed source must get a new name) and
the per-process cache of built kernels. Each backend module keeps its own sources and passes its own
``mx.fast.*_kernel`` factory."""

from __future__ import annotations

import hashlib
from typing import Callable


def slab_input_names(num_slabs: int) -> list[str]:
    """Kernel inputs for the slab tensors: ``k0..kN-1`` then ``v0..vN-1``."""
    return [f"k{i}" for i in range(num_slabs)] + [f"v{i}" for i in range(num_slabs)]


def source_tag(*parts: str) -> str:
    """A short hash of the kernel's sources, appended to its name."""
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:10]


class PagedDecodeKernels:
    """Builds (on first use) and caches one backend's kernels: a first pass per (slab count, direct) and one
    split-merge kernel. ``factory`` is ``mx.fast.cuda_kernel`` or ``mx.fast.metal_kernel`` (fetched lazily so this
    module never imports mlx); ``pass1_source(num_slabs, direct)`` renders the first pass."""

    def __init__(self, factory_name: str, header: str, pass1_source: Callable[[int, bool], str],
                 merge_source: str) -> None:
        self.factory_name = factory_name
        self.header = header
        self.pass1_source = pass1_source
        self.merge_source = merge_source
        self._pass1: dict[tuple[int, bool], object] = {}
        self._merge: object | None = None

    def _factory(self):
        import mlx.core as mx

        return getattr(mx.fast, self.factory_name)

    def pass1(self, num_slabs: int, direct: bool):
        """The first-pass kernel for ``num_slabs`` slab inputs (0: one ``slab_table`` input instead, the CUDA table
        route); ``direct`` writes the output (one split)."""
        key = (num_slabs, direct)
        if key not in self._pass1:
            source = self.pass1_source(num_slabs, direct)
            kind = "direct" if direct else "split"
            self._pass1[key] = self._factory()(
                name=f"ssp_paged_decode_{kind}_s{num_slabs}_{source_tag(self.header, source)}",
                input_names=["queries", "meta", *(slab_input_names(num_slabs) if num_slabs else ["slab_table"])],
                output_names=["out"] if direct else ["part_acc", "part_ml"],
                source=source, header=self.header, ensure_row_contiguous=True)
        return self._pass1[key]

    def merge(self):
        """The kernel that merges the per-split partial softmax states."""
        if self._merge is None:
            self._merge = self._factory()(
                name=f"ssp_paged_decode_merge_{source_tag(self.header, self.merge_source)}",
                input_names=["part_acc", "part_ml"], output_names=["out"],
                source=self.merge_source, header=self.header, ensure_row_contiguous=True)
        return self._merge
