"""The numpy reference (models/reference.py) checked against PyTorch on CPU.

Forward goldens for every adapter come from the reference, so it must be right on its
own: each node kind is compared with ``torch.nn.functional`` (or ``torch.nn.LSTM`` with
packed sequences), then every tiny zoo model end to end against ``torch_forward``
(conftest.py). Everything runs in float64, so tolerances are tight. A few properties
that need no torch (masking, frozen prefix) come last.
"""

from __future__ import annotations

import numpy as np
import pytest

from models import ir
from models import reference as ref
from models.inputs import Batch, make_batch
from models.weights import canonical_weights
from models.zoo import TINY, get_model

TIGHT = dict(rtol=1e-10, atol=1e-12)


def rand(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng([seed, *shape]).standard_normal(shape) * scale


def t(torch, array: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(array))


# ---------------------------------------------------------------------------------------
# Node kinds one at a time.

# (N, C, H, W, O, kernel, stride, padding, groups, bias)
CONV_CASES = [
    (2, 3, 9, 9, 4, (3, 3), (1, 1), (0, 0), 1, True),
    (2, 4, 11, 10, 6, (5, 5), (2, 2), (2, 2), 2, True),        # AlexNet conv2-like groups
    (1, 6, 8, 13, 6, (3, 5), (2, 1), (0, 2), 6, False),        # depthwise, non-square
    (3, 2, 7, 7, 8, (7, 7), (1, 1), (3, 3), 1, False),         # ResNet stem-like padding
    (1, 3, 17, 17, 5, (11, 11), (4, 4), (2, 2), 1, True),      # AlexNet conv1-like stride
]


@pytest.mark.parametrize("n,c,h,w,o,kernel,stride,padding,groups,bias", CONV_CASES)
def test_conv2d_matches_torch(torch, n, c, h, w, o, kernel, stride, padding, groups, bias):
    x = rand(n, c, h, w)
    weight = rand(o, c // groups, *kernel, seed=1)
    b = rand(o, seed=2) if bias else None
    got = ref.conv2d(x, weight, b, stride, padding, groups)
    want = torch.nn.functional.conv2d(t(torch, x), t(torch, weight),
                                      None if b is None else t(torch, b), stride, padding,
                                      1, groups).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **TIGHT)


def test_conv2d_counts_macs_from_operands():
    # 2 examples, 4 -> 6 channels in 2 groups, 3x3 kernel on 5x5 (no padding): 3x3 outputs.
    macs: list[int] = []
    ref.conv2d(rand(2, 4, 5, 5), rand(6, 2, 3, 3), None, (1, 1), (0, 0), 2, macs)
    assert sum(macs) == 2 * 6 * 3 * 3 * (2 * 3 * 3)


# (H, W, kernel, stride, padding, ceil_mode): the ceil cases include a last window that
# hangs over the input, one that torch drops because it would start in the padding, and
# GoogLeNet's 3x3/2 ceil pools.
POOL_CASES = [
    (8, 8, (2, 2), (2, 2), (0, 0), False),
    (7, 9, (3, 3), (2, 2), (0, 0), False),
    (8, 8, (3, 3), (2, 2), (0, 0), True),     # last window covers 2 of 3 rows
    (112, 112, (3, 3), (2, 2), (0, 0), True),  # GoogLeNet pool1: 56, not 55
    (10, 7, (3, 2), (3, 2), (0, 0), True),
    (6, 6, (3, 3), (1, 1), (1, 1), False),    # Inception's pool branch
    (9, 9, (3, 3), (2, 2), (1, 1), False),    # ResNet's stem pool
    (5, 5, (2, 2), (2, 2), (1, 1), True),     # torch drops the 4th window (starts at pad)
    (8, 6, (3, 3), (2, 2), (1, 1), True),
]


# Every case as max pooling; the unpadded ones also as average pooling (the IR has no
# padded average pooling).
POOL_KIND_CASES = [("max", *case) for case in POOL_CASES] + \
    [("avg", *case) for case in POOL_CASES if case[4] == (0, 0)]


@pytest.mark.parametrize("kind,h,w,kernel,stride,padding,ceil_mode", POOL_KIND_CASES)
def test_pool2d_matches_torch(torch, kind, h, w, kernel, stride, padding, ceil_mode):
    x = rand(2, 3, h, w)
    F = torch.nn.functional
    pool = F.max_pool2d if kind == "max" else F.avg_pool2d
    want = pool(t(torch, x), kernel, stride, padding, ceil_mode=ceil_mode).numpy()
    got = ref.pool2d(x, kind, kernel, stride, padding, ceil_mode)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **TIGHT)


def test_pool_out_size_follows_torch_rule():
    # Hand-worked: ceil((5 + 2 - 2) / 2) + 1 = 4, but the 4th window would start at
    # 3 * 2 = 6 >= 5 + 1, inside the right padding, so it is dropped: 3.
    assert ref.pool_out_size(5, 2, 2, 1, ceil_mode=True) == 3
    assert ref.pool_out_size(112, 3, 2, 0, ceil_mode=True) == 56
    assert ref.pool_out_size(112, 3, 2, 0, ceil_mode=False) == 55


def test_avg_pool_ceil_divides_by_valid_elements():
    # 1x3 input, 2-wide windows of stride 2 in ceil mode: [0, 1] and the clipped [2].
    x = np.array([1.0, 3.0, 10.0]).reshape(1, 1, 1, 3)
    got = ref.pool2d(x, "avg", (1, 2), (1, 2), (0, 0), ceil_mode=True)
    np.testing.assert_array_equal(got.ravel(), [2.0, 10.0])


def test_padded_avg_pool_is_rejected():
    with pytest.raises(ValueError):
        ref.pool2d(rand(1, 1, 4, 4), "avg", (3, 3), (1, 1), (1, 1))


def test_global_avg_pool_matches_torch(torch):
    x = rand(2, 5, 7, 3)
    want = torch.nn.functional.adaptive_avg_pool2d(t(torch, x), 1).numpy()[:, :, 0, 0]
    np.testing.assert_allclose(ref.global_avg_pool(x), want, **TIGHT)


@pytest.mark.parametrize("kind", ["relu", "tanh", "sigmoid"])
def test_activation_matches_torch(torch, kind):
    x = np.concatenate([rand(3, 50, scale=30.0), [[-1000.0, 1000.0] * 25]])
    with np.errstate(over="raise", invalid="raise"):  # a naive sigmoid overflows exp(1000)
        got = ref.activation(x, kind)
    np.testing.assert_allclose(got, getattr(torch, kind)(t(torch, x)).numpy(), **TIGHT)


def test_flatten_is_channel_major_like_torch(torch):
    # NCHW flattening keeps (C, H, W) order; an NHWC reading would permute features.
    x = rand(2, 3, 4, 5)
    model = ir.Model("f", "test", ir.InputSpec("image", (3, 4, 5)), (ir.Flatten("f"),),
                     ir.Loss("sum"))
    want = torch.flatten(t(torch, x), 1).numpy()
    np.testing.assert_array_equal(ref.forward(model, {}, Batch(x)), want)


@pytest.mark.parametrize("size,alpha,beta,k", [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.9, 2.0),
                                               (1, 0.1, 0.5, 1.0), (7, 1.0, 0.75, 1.0)])
def test_lrn_matches_torch(torch, size, alpha, beta, k):
    # Large inputs and alpha so the normaliser is far from 1 and a wrong window shows.
    x = rand(2, 9, 4, 5, scale=10.0)
    want = torch.nn.functional.local_response_norm(t(torch, x), size, alpha, beta, k).numpy()
    np.testing.assert_allclose(ref.lrn(x, size, alpha, beta, k), want, **TIGHT)


def test_lrn_matches_caffe_formula_by_hand():
    # Channel 0 with size 3 sees channels -1 (zero padding), 0 and 1.
    x = np.array([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)
    got = ref.lrn(x, 3, alpha=3.0, beta=1.0, k=1.0)
    assert got[0, 0, 0, 0] == pytest.approx(1.0 / (1.0 + 3.0 / 3 * (0 + 1 + 4)))
    assert got[0, 2, 0, 0] == pytest.approx(3.0 / (1.0 + 3.0 / 3 * (4 + 9 + 0)))


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (7, 5)])
@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_matches_torch(torch, shape, train):
    c = shape[1]
    x = rand(*shape, scale=3.0) + 1.5
    gamma, beta = rand(c, seed=1), rand(c, seed=2)
    mean, var = rand(c, seed=3), np.abs(rand(c, seed=4)) + 0.5
    want = torch.nn.functional.batch_norm(
        t(torch, x), t(torch, mean.copy()), t(torch, var.copy()), t(torch, gamma),
        t(torch, beta), training=train, eps=1e-3).numpy()
    got = ref.batch_norm(x, gamma, beta, mean, var, 1e-3, train)
    np.testing.assert_allclose(got, want, **TIGHT)


@pytest.mark.parametrize("shape", [(4, 6), (3, 5, 7)])
def test_layer_norm_matches_its_formula_and_torch(torch, shape):
    from models.ops.layer_norm import layer_norm

    x = rand(*shape, scale=3.0) + 2.0
    f = shape[-1]
    gamma, beta = rand(f, seed=1) + 1.0, rand(f, seed=2)
    got = layer_norm(x, gamma, beta, 1e-3)
    # By hand, one row at a time: the biased variance (divided by F, not F - 1).
    rows = x.reshape(-1, f)
    mean = rows.sum(axis=1, keepdims=True) / f
    var = ((rows - mean) ** 2).sum(axis=1, keepdims=True) / f
    want = ((rows - mean) / np.sqrt(var + 1e-3) * gamma + beta).reshape(shape)
    np.testing.assert_allclose(got, want, **TIGHT)
    F = torch.nn.functional
    np.testing.assert_allclose(got, F.layer_norm(t(torch, x), (f,), t(torch, gamma),
                                                 t(torch, beta), eps=1e-3).numpy(), **TIGHT)


def test_layer_norm_rows_have_zero_mean_and_unit_variance_before_the_affine():
    from models.ops.layer_norm import layer_norm

    x = rand(5, 9, scale=4.0) - 1.0
    y = layer_norm(x, np.ones(9), np.zeros(9), 1e-12)
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=-1), 1.0, rtol=1e-9)


def test_dense_and_tied_dense_match_torch_linear(torch):
    x, w, b = rand(4, 6), rand(6, 3, seed=1), rand(3, seed=2)
    model = ir.Model("tied", "test", ir.InputSpec("vector", (6,)),
                     (ir.Dense("enc", 6, 3), ir.TiedDense("dec", "enc")), ir.Loss("sum"))
    b_dec = rand(6, seed=3)
    got = ref.forward(model, {"enc.weight": w, "enc.bias": b, "dec.bias": b_dec}, Batch(x))
    F = torch.nn.functional
    # torch.nn.Linear stores (out, in); the canonical dense weight is (in, out).
    code = F.linear(t(torch, x), t(torch, w.T), t(torch, b))
    want = F.linear(code, t(torch, w), t(torch, b_dec)).numpy()
    np.testing.assert_allclose(got, want, **TIGHT)


def test_embedding_matches_torch(torch):
    table = rand(11, 4)
    tokens = np.array([[0, 3, 10], [7, 7, 0]])
    want = torch.nn.functional.embedding(t(torch, tokens), t(torch, table)).numpy()
    model = ir.Model("emb", "test", ir.InputSpec("tokens", (3,), 11),
                     (ir.Embedding("e", 11, 4),), ir.Loss("sum"))
    np.testing.assert_array_equal(ref.forward(model, {"e.table": table}, Batch(tokens)), want)


def test_lstm_matches_torch_packed_sequences(torch):
    n, steps, fin, hidden = 4, 6, 3, 5
    x = rand(n, steps, fin)
    lengths = np.array([6, 1, 4, 2])
    w_ih, w_hh, bias = rand(fin, 4 * hidden, seed=1), rand(hidden, 4 * hidden, seed=2), \
        rand(4 * hidden, seed=3)
    cell = torch.nn.LSTM(fin, hidden, batch_first=True).double()
    with torch.no_grad():
        # torch keeps (4H, in) weights, gate order (i, f, g, o) like ours, and two biases.
        cell.weight_ih_l0.copy_(t(torch, w_ih.T))
        cell.weight_hh_l0.copy_(t(torch, w_hh.T))
        cell.bias_ih_l0.copy_(t(torch, bias))
        cell.bias_hh_l0.zero_()
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            t(torch, x), torch.from_numpy(lengths), batch_first=True, enforce_sorted=False)
        out, (h_n, c_n) = cell(packed)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=steps)
    outputs, h, c = ref.lstm(x, w_ih, w_hh, bias, lengths)
    valid = np.arange(steps)[None, :] < lengths[:, None]
    np.testing.assert_allclose(outputs[valid], out.numpy()[valid], **TIGHT)
    # Packed sequences stop at each length; the reference holds its state, so they agree.
    np.testing.assert_allclose(h, h_n[0].numpy(), **TIGHT)
    np.testing.assert_allclose(c, c_n[0].numpy(), **TIGHT)


def test_mean_over_time_ignores_padded_steps():
    x = rand(2, 4, 3)
    x[1, 2:] = 1e9  # garbage past length 2 must not leak into the mean
    got = ref.mean_over_time(x, np.array([4, 2]))
    np.testing.assert_allclose(got[0], x[0].mean(axis=0), **TIGHT)
    np.testing.assert_allclose(got[1], x[1, :2].mean(axis=0), **TIGHT)


def test_losses_match_torch(torch):
    F = torch.nn.functional
    model = get_model("sae_tiny_se")
    weights = canonical_weights(model)
    batch = make_batch(model, 5)
    logits = ref.forward(model, weights, batch)
    want = F.cross_entropy(t(torch, logits), torch.from_numpy(batch.labels).long()).item()
    assert ref.loss(model, weights, batch) == pytest.approx(want, rel=1e-12)

    ae = get_model("sae_tiny_ae2")
    weights, batch = canonical_weights(ae), make_batch(ae, 5)
    body_in, out = ref.run(ae, weights, batch, train=True)
    want = F.mse_loss(t(torch, out), t(torch, body_in)).item()
    assert ref.loss(ae, weights, batch) == pytest.approx(want, rel=1e-12)


# ---------------------------------------------------------------------------------------
# Whole models: every tiny zoo model against a torch.nn.functional interpreter.


def _torch_reference(torch, torch_forward, model, weights, batch, train):
    def param(name, shape):
        assert weights[name].shape == tuple(shape), (name, weights[name].shape, shape)
        return torch.from_numpy(weights[name]).double()

    x = torch.from_numpy(batch.x)
    x = x.long() if model.input.kind == "tokens" else x.double()
    lengths = None if batch.lengths is None else torch.from_numpy(batch.lengths).long()
    with torch.no_grad():
        body_in, out = torch_forward(model, param, x, lengths, train)
    return body_in.numpy(), out.numpy()


# The tiny models all flatten a 1x1 map, so full LeNet (50x4x4 into ip1) also runs: it
# is the one cheap model whose Flatten order matters.
@pytest.mark.parametrize("name", [*TINY, "lenet"])
@pytest.mark.parametrize("train", [False, True])
def test_tiny_model_matches_torch(torch, torch_forward, name, train):
    model = get_model(name)
    weights = canonical_weights(model)
    batch = make_batch(model, 3)
    body_in, want = _torch_reference(torch, torch_forward, model, weights, batch, train)
    got = ref.forward(model, weights, batch, train=train)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)
    if model.loss.kind == "softmax_xent":
        F = torch.nn.functional
        want_loss = F.cross_entropy(t(torch, want), torch.from_numpy(batch.labels).long())
    elif model.loss.kind == "mse_reconstruction":
        want_loss = ((want - body_in) ** 2).mean()
    elif model.loss.kind == "token_xent":
        F = torch.nn.functional
        want_loss = F.cross_entropy(t(torch, want).flatten(0, 1),
                                    torch.from_numpy(batch.labels).long().flatten(), ignore_index=-1)
    else:
        want_loss = want.sum()
    assert ref.loss(model, weights, batch, train=train) == pytest.approx(float(want_loss),
                                                                         rel=1e-9)


# ---------------------------------------------------------------------------------------
# Properties that need no torch.


def test_tokens_past_lengths_do_not_change_the_output():
    model = get_model("lstm_tiny")
    weights = canonical_weights(model)
    batch = make_batch(model, 6)
    assert (batch.lengths < batch.x.shape[1]).any(), "the batch must have padding to test"
    noisy = batch.x.copy()
    padded = np.arange(noisy.shape[1])[None, :] >= batch.lengths[:, None]
    noisy[padded] = 1 + np.arange(padded.sum()) % (model.input.vocab - 1)
    np.testing.assert_array_equal(ref.forward(model, weights, batch),
                                  ref.forward(model, weights, Batch(noisy, batch.labels,
                                                                    batch.lengths)))


def test_frozen_prefix_feeds_the_body_and_is_the_mse_target():
    model = get_model("sae_tiny_ae2")
    weights = {k: v.astype(np.float64) for k, v in canonical_weights(model).items()}
    batch = make_batch(model, 4)
    # By hand: enc1 (frozen), then enc2 and its tied decoder, all sigmoid.
    h1 = ref.sigmoid(batch.x @ weights["enc1.weight"] + weights["enc1.bias"])
    h2 = ref.sigmoid(h1 @ weights["enc2.weight"] + weights["enc2.bias"])
    recon = ref.sigmoid(h2 @ weights["enc2.weight"].T + weights["dec2.bias"])
    np.testing.assert_allclose(ref.forward(model, weights, batch), recon, **TIGHT)
    assert ref.loss(model, weights, batch) == pytest.approx(np.mean((recon - h1) ** 2),
                                                            rel=1e-12)


def test_train_flag_only_changes_batch_norm_models():
    for name, changes in [("resnet_tiny", True), ("alexnet_bvlc_tiny", False)]:
        model = get_model(name)
        weights, batch = canonical_weights(model), make_batch(model, 4)
        same = np.array_equal(ref.forward(model, weights, batch, train=False),
                              ref.forward(model, weights, batch, train=True))
        assert same != changes, name


def test_trace_reports_every_leaf_in_order():
    model = get_model("resnet_basic_tiny")
    trace: list[ref.LayerTrace] = []
    out = ref.forward(model, canonical_weights(model), make_batch(model, 2), trace=trace)
    assert trace[0].name == "conv1" and trace[-1].name == "fc"
    assert trace[-1].out_shape == out.shape[1:]
    leaves = [n.name for n in ir.walk(model.body) if isinstance(n, ir.LEAF_TYPES)]
    assert sorted(x.name for x in trace) == sorted(leaves)


@pytest.mark.parametrize("shape,kernel,stride,padding,ceil_mode", [
    ((2, 3, 17, 19), (3, 3), (2, 2), (1, 1), True),
    ((2, 3, 16, 16), (2, 2), (2, 2), (0, 0), False),
    ((1, 4, 13, 13), (3, 3), (1, 1), (1, 1), False),
    ((2, 2, 7, 9), (5, 3), (3, 2), (2, 1), True),
    ((1, 1, 6, 6), (3, 3), (3, 3), (0, 0), True),
])
def test_max_pooling_is_the_maximum_of_each_window(shape, kernel, stride, padding, ceil_mode):
    # pool2d takes the maximum offset by offset; here each window's maximum is taken whole,
    # over the windows view of the padded input. Max is exact, so the two are equal.
    from numpy.lib.stride_tricks import sliding_window_view

    x = np.random.default_rng(7).standard_normal(shape)
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    oh = ref.pool_out_size(shape[2], kh, sh, ph, ceil_mode)
    ow = ref.pool_out_size(shape[3], kw, sw, pw, ceil_mode)
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph + kh), (pw, pw + kw)),
                    constant_values=-np.inf)
    windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    expected = windows[:, :, :oh, :ow].max(axis=(4, 5))
    found = ref.pool2d(x, "max", kernel, stride, padding, ceil_mode)
    np.testing.assert_array_equal(found, expected)
