"""The detector's median of block means: numpy's nanmedian row by row, NaN where a row has nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpuscope.stragglers.signal import nanmedian_rows


@pytest.mark.parametrize("seed", range(5))
def test_it_is_numpys_nanmedian_per_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(50):
        values = rng.normal(size=(int(rng.integers(1, 9)), int(rng.integers(1, 41))))
        values[rng.random(values.shape) < rng.uniform(0, 0.8)] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows with nothing seen
            expected = np.nanmedian(values, axis=1)
        np.testing.assert_allclose(nanmedian_rows(values), expected, equal_nan=True)


def test_even_and_odd_counts_and_empty_rows() -> None:
    values = np.array([[3.0, np.nan, 1.0, 2.0], [4.0, 1.0, np.nan, np.nan], [np.nan] * 4])
    np.testing.assert_array_equal(nanmedian_rows(values), [2.0, 2.5, np.nan])
