"""Which shape changes change the bits of a float32 result under this process's BLAS (diagnosis for
docs/testing.md, "Numerics"). Run once per BLAS:

  for c in Prescott Haswell SkylakeX Cooperlake; do OPENBLAS_CORETYPE=$c .venv/bin/python lab/blas_shape_probe.py; done
  SLABSCOPE_BLAS=reference .venv/bin/python lab/blas_shape_probe.py

Prints the BLAS line, then each comparison that differs (the same rows of a matmul computed with 1 row vs 3; q.k^T
over T keys vs the same keys left-padded to P; P.V with leading zero weights; SDPA over T keys vs padded and
masked; one sequence of a batch of 3 vs alone). A comparison that is not listed gave equal bytes.
"""

from app.models.blas import enable_openblas

print(enable_openblas())

import mlx.core as mx  # noqa: E402


def linear_rows(differ):
    for k, n in [(64, 512), (64, 128), (128, 64), (576, 49152), (576, 1536)]:
        x, w = mx.random.normal((3, k)), mx.random.normal((n, k))
        full = x @ w.T
        if not all(mx.array_equal(full[i:i + 1], x[i:i + 1] @ w.T).item() for i in range(3)):
            differ.append(f"x @ W.T, K={k} N={n}: a row of 3 vs the row alone")


def attention(differ, head_dim=16, group=2):
    for t, p in [(10, 30), (20, 45), (37, 64)]:
        q = mx.random.normal((1, 2, group, head_dim))
        k, v = mx.random.normal((1, 2, t, head_dim)), mx.random.normal((1, 2, t, head_dim))
        pad = mx.zeros((1, 2, p - t, head_dim))
        kp, vp = mx.concatenate([pad, k], axis=2), mx.concatenate([pad, v], axis=2)
        if not mx.array_equal(q @ k.swapaxes(-1, -2), (q @ kp.swapaxes(-1, -2))[..., p - t:]).item():
            differ.append(f"q @ k^T: {t} keys vs the same keys left-padded to {p}")
        weights = mx.softmax(q @ k.swapaxes(-1, -2), axis=-1)
        padded = mx.concatenate([mx.zeros((1, 2, group, p - t)), weights], axis=-1)
        if not mx.array_equal(weights @ v, padded @ vp).item():
            differ.append(f"P @ V: {t} keys vs {p - t} leading zero weights + {t}")
        mask = mx.concatenate([mx.zeros((p - t,), dtype=mx.bool_), mx.ones((t,), dtype=mx.bool_)])
        qq = mx.random.normal((1, 2 * group, 1, head_dim))
        alone = mx.fast.scaled_dot_product_attention(qq, k, v, scale=0.25)
        masked = mx.fast.scaled_dot_product_attention(qq, kp, vp, scale=0.25, mask=mask[None, None, None, :])
        if not mx.array_equal(alone, masked).item():
            differ.append(f"SDPA: {t} keys vs left-padded to {p} and masked")
        qb = mx.random.normal((3, 2 * group, 1, head_dim))
        kb, vb = mx.random.normal((3, 2, t, head_dim)), mx.random.normal((3, 2, t, head_dim))
        batch = mx.fast.scaled_dot_product_attention(qb, kb, vb, scale=0.25)
        if not all(mx.array_equal(batch[i:i + 1], mx.fast.scaled_dot_product_attention(
                qb[i:i + 1], kb[i:i + 1], vb[i:i + 1], scale=0.25)).item() for i in range(3)):
            differ.append(f"SDPA: one sequence of a batch of 3 vs alone ({t} keys)")


if __name__ == "__main__":
    mx.random.seed(0)
    found: list[str] = []
    linear_rows(found)
    attention(found)
    print("\n".join(f"  differs: {line}" for line in found) or "  every comparison gave equal bytes")
