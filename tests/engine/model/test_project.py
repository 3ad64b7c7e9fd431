"""engine/model/project.py: the shape chosen for a few rows changes speed, never the product."""
import numpy as np
import pytest

from engine.model.project import GEMV_REREAD_BYTES_MAX, GEMV_ROWS_MAX, PAD_ROWS_TO, project

RNG = np.random.default_rng(7)
LAYER_W = RNG.standard_normal((96, 160), dtype=np.float32)            # [in, out], C order
HEAD_W = RNG.standard_normal((160, 96), dtype=np.float32).T           # [in, out] view of [out, in]


@pytest.mark.parametrize("w", [LAYER_W, HEAD_W], ids=["c_order", "transposed_view"])
@pytest.mark.parametrize("rows", list(range(1, 2 * PAD_ROWS_TO + 2)))
def test_the_product_is_x_at_w_for_every_row_count(w, rows):
    x = RNG.standard_normal((rows, w.shape[0]), dtype=np.float32)
    out = project(x, w)
    assert out.shape == (rows, w.shape[1]) and out.dtype == np.float32
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", list(range(2, GEMV_ROWS_MAX + 1)))
def test_a_few_rows_of_a_cached_matrix_are_each_bit_for_bit_the_row_alone(rows):
    """A drafted row verified beside its stream's last token gets exactly the numbers a
    one-row decode step would (the same gemv), not a gemm's differently rounded ones."""
    assert LAYER_W.nbytes <= GEMV_REREAD_BYTES_MAX
    x = RNG.standard_normal((rows, LAYER_W.shape[0]), dtype=np.float32)
    out = project(x, LAYER_W)
    for i in range(rows):
        assert np.array_equal(out[i], (x[i:i + 1] @ LAYER_W)[0])


@pytest.mark.parametrize("rows", list(range(2, PAD_ROWS_TO + 3)))
def test_a_rows_result_does_not_depend_on_the_other_rows(rows):
    x = RNG.standard_normal((rows, LAYER_W.shape[0]), dtype=np.float32)
    other = x.copy()
    other[1:] = RNG.standard_normal((rows - 1, LAYER_W.shape[0]), dtype=np.float32)
    assert np.array_equal(project(x, LAYER_W)[0], project(other, LAYER_W)[0])


def test_a_strided_activation_is_projected_as_its_values():
    wide = RNG.standard_normal((5, 2 * LAYER_W.shape[0]), dtype=np.float32)
    x = wide[:, ::2]                                                   # not contiguous
    np.testing.assert_allclose(project(x, LAYER_W), np.ascontiguousarray(x) @ LAYER_W,
                               rtol=1e-5, atol=1e-5)
