"""The host's cache of large canonical arrays (models/weights.py): the same numbers as a
fresh draw, whatever the cache holds."""

import numpy as np
import pytest

from models import weights
from models.params import ParamSpec
from models.zoo import get_model

LARGE = ParamSpec("fc6.weight", (1024, 1024), "he", 1024)
SMALL = ParamSpec("fc6.bias", (1024,), "bias", 1024)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_WEIGHTS_CACHE", str(tmp_path))
    return tmp_path


def test_a_large_array_is_drawn_once_then_read_back_equal(cache):
    first = weights.cached_draw(LARGE, seed=3)
    files = list(cache.glob("*.npy"))
    assert len(files) == 1
    assert np.array_equal(first, weights.draw(LARGE, seed=3))
    again = weights.cached_draw(LARGE, seed=3)
    assert np.array_equal(again, first) and again.dtype == np.float32
    # Another seed is another array, and another file.
    other = weights.cached_draw(LARGE, seed=4)
    assert not np.array_equal(other, first)
    assert len(list(cache.glob("*.npy"))) == 2


def test_small_arrays_are_not_cached(cache):
    weights.cached_draw(SMALL)
    assert not list(cache.iterdir())


@pytest.mark.parametrize("damage", ["truncate", "other shape", "garbage"])
def test_a_damaged_file_is_drawn_again_and_replaced(cache, damage):
    path = weights.cache_path(LARGE, 0, cache)
    weights.cached_draw(LARGE)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "other shape":
        np.save(path, np.zeros((1024, 1023), np.float32))
    else:
        path.write_bytes(b"not an array")
    values = weights.cached_draw(LARGE)
    assert np.array_equal(values, weights.draw(LARGE))
    assert np.array_equal(np.load(path), values)
    assert not list(cache.glob("*.tmp"))


def test_off_draws_without_a_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_WEIGHTS_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert np.array_equal(weights.cached_draw(LARGE), weights.draw(LARGE))
    assert not list(tmp_path.rglob("*.npy"))


def test_an_unwritable_cache_still_gives_the_weights(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("DLBENCH_WEIGHTS_CACHE", str(blocked / "weights"))
    assert np.array_equal(weights.cached_draw(LARGE), weights.draw(LARGE))


def test_canonical_weights_of_a_model_are_the_same_cached_or_not(cache, monkeypatch):
    model = get_model("alexnet")
    cached = weights.canonical_weights(model)          # fills the cache
    read = weights.canonical_weights(model)            # reads it
    monkeypatch.setenv("DLBENCH_WEIGHTS_CACHE", "off")
    drawn = weights.canonical_weights(model)
    assert list(cache.glob("*.npy"))
    assert cached.keys() == drawn.keys() == read.keys()
    for name in drawn:
        assert np.array_equal(read[name], drawn[name]), name
