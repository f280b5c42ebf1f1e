"""The host's cache of large seeded arrays (models/array_cache.py), for weights
(models/weights.py) and inputs (models/inputs.py): the same numbers as a fresh draw,
whatever the cache holds."""

import numpy as np
import pytest

from models import array_cache, inputs, weights
from models.params import ParamSpec
from models.zoo import get_model

LARGE = ParamSpec("fc6.weight", (1024, 1024), "he", 1024)
SMALL = ParamSpec("fc6.bias", (1024,), "bias", 1024)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_ARRAY_CACHE", str(tmp_path))
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
    weights.cached_draw(LARGE)
    [path] = cache.glob("*.npy")
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
    monkeypatch.setenv("DLBENCH_ARRAY_CACHE", "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert np.array_equal(weights.cached_draw(LARGE), weights.draw(LARGE))
    assert not list(tmp_path.rglob("*.npy"))


def test_an_unwritable_cache_still_gives_the_weights(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("DLBENCH_ARRAY_CACHE", str(blocked / "weights"))
    assert np.array_equal(weights.cached_draw(LARGE), weights.draw(LARGE))


def test_canonical_weights_of_a_model_are_the_same_cached_or_not(cache, monkeypatch):
    model = get_model("alexnet")
    cached = weights.canonical_weights(model)          # fills the cache
    read = weights.canonical_weights(model)            # reads it
    monkeypatch.setenv("DLBENCH_ARRAY_CACHE", "off")
    drawn = weights.canonical_weights(model)
    assert list(cache.glob("*.npy"))
    assert cached.keys() == drawn.keys() == read.keys()
    for name in drawn:
        assert np.array_equal(read[name], drawn[name]), name


def uncached_batch(model, batch, seed, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setenv("DLBENCH_ARRAY_CACHE", "off")
        return inputs.make_batch(model, batch, seed)


@pytest.mark.parametrize("name, batch", [("alexnet", 32), ("sae_ae1", 4096)])
def test_a_large_input_batch_is_cached_and_read_back_equal(cache, monkeypatch, name, batch):
    model = get_model(name)
    assert batch * int(np.prod(model.input.shape)) >= array_cache.CACHED_VALUES
    first = inputs.make_batch(model, batch, seed=2)
    assert len(list(cache.glob("input_*.npy"))) == 1
    again = inputs.make_batch(model, batch, seed=2)
    drawn = uncached_batch(model, batch, 2, monkeypatch)
    for batch_ in (first, again):
        assert np.array_equal(batch_.x, drawn.x) and batch_.x.dtype == np.float32
        assert np.array_equal(batch_.labels, drawn.labels) if drawn.labels is not None \
            else batch_.labels is None
    # Another seed, batch size or model is another array, and another file.
    inputs.make_batch(model, batch, seed=3)
    inputs.make_batch(model, batch + 1, seed=2)
    assert len(list(cache.glob("input_*.npy"))) == 3


def test_small_input_batches_and_token_batches_are_not_cached(cache):
    inputs.make_batch(get_model("lenet"), 64)      # 50 k values
    inputs.make_batch(get_model("lstm"), 4096)     # tokens: drawn, never cached
    assert not list(cache.iterdir())


def test_an_input_file_of_another_shape_is_drawn_again(cache, monkeypatch):
    model = get_model("alexnet")
    inputs.make_batch(model, 32)
    [path] = cache.glob("input_*.npy")
    np.save(path, np.zeros((32, 3, 224, 223), np.float32))
    assert np.array_equal(inputs.make_batch(model, 32).x,
                          uncached_batch(model, 32, 0, monkeypatch).x)


def test_a_cached_input_holds_the_seeded_stream_of_labels_then_pixels(cache):
    """The draw order the cache key stands for: labels first, then the image."""
    import zlib

    model = get_model("alexnet")
    rng = np.random.default_rng([5, 32, zlib.crc32(model.name.encode())])
    labels = rng.integers(0, model.loss.classes, size=32, dtype=np.int32)
    x = rng.standard_normal((32, *model.input.shape), dtype=np.float32)
    for _ in range(2):      # drawn and written, then read back
        batch = inputs.make_batch(model, 32, seed=5)
        assert np.array_equal(batch.labels, labels) and np.array_equal(batch.x, x)
