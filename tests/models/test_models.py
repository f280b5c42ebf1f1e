"""The zoo, its analysis, canonical weights and inputs, and ``python -m models``.

Expected numbers come from outside ``models/``: published parameter and FLOP figures
(cited beside each), hand arithmetic written out here, the numpy reference's actual
matrix products, and (where torch is installed) ``torch.utils.flop_counter``.
Needs only numpy unless a test takes the ``torch`` fixture.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models import ir
from models import reference as ref
from models.analysis import ModelError, analyse
from models.inputs import Batch, make_batch
from models.layers import conv, dense, relu, softmax
from models.weights import canonical_weights
from models.zoo import TINY, ZOO, UnknownModel, get_model, names

REPO = Path(__file__).resolve().parents[2]


def params(name: str) -> int:
    return analyse(get_model(name)).params


def gmacs(name: str) -> float:
    """Forward multiply-accumulates per example, in billions (analysis FLOPs are 2×MACs)."""
    return analyse(get_model(name)).flops / 2 / 1e9


def layer(name: str, layer_name: str):
    return next(info for info in analyse(get_model(name)).layers if info.name == layer_name)


# ---------------------------------------------------------------------------------------
# Parameter counts: published figures.

PUBLISHED_PARAMS = {
    # Caffe examples/mnist/lenet.prototxt: conv1 20@5x5, conv2 50@5x5, ip1 500, ip2 10;
    # (1*25 + 1)*20 + (20*25 + 1)*50 + (50*4*4 + 1)*500 + (500 + 1)*10.
    "lenet": 431_080,
    # torchvision AlexNet_Weights.IMAGENET1K_V1, num_params.
    "alexnet": 61_100_840,
    # BVLC Caffe models/bvlc_alexnet/bvlc_alexnet.caffemodel (two-column, grouped convs).
    "alexnet_bvlc": 60_965_224,
    # torchvision VGG11/16/19_Weights.IMAGENET1K_V1, num_params.
    "vgg_a": 132_863_336,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    # torchvision ResNet*_Weights.IMAGENET1K_V1, num_params (BN buffers not counted).
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    # timm resnet200 (fb.resnet.torch's (3, 24, 36, 3) bottleneck network).
    "resnet200": 64_673_832,
    # BVLC Caffe models/bvlc_googlenet, without the two auxiliary classifiers.
    "googlenet": 6_998_552,
}


@pytest.mark.parametrize("name,expected", PUBLISHED_PARAMS.items())
def test_published_parameter_counts(name, expected):
    assert params(name) == expected


def test_overfeat_parameters_by_layer_and_paper():
    # Sermanet et al. 2014, Table 1 (fast model), 231x231 input: 56 -> pool 28 -> conv2
    # 5x5 valid 24 -> pool 12 -> conv3-5 12 -> pool 6.
    conv_params = ((3 * 11 * 11 + 1) * 96          # conv1 11x11/4
                   + (96 * 5 * 5 + 1) * 256        # conv2 5x5
                   + (256 * 3 * 3 + 1) * 512       # conv3 3x3 pad 1
                   + (512 * 3 * 3 + 1) * 1024      # conv4
                   + (1024 * 3 * 3 + 1) * 1024)    # conv5
    dense_params = ((1024 * 6 * 6 + 1) * 3072      # fc6
                    + (3072 + 1) * 4096            # fc7
                    + (4096 + 1) * 1000)           # fc8
    assert conv_params + dense_params == 145_920_872
    assert params("overfeat") == conv_params + dense_params
    # The paper's Table 4 gives the fast model as "145M" parameters: 145.9M, truncated.
    assert params("overfeat") // 1_000_000 == 145


def test_alexnet_variants_by_arithmetic():
    # LRN has no parameters; ungrouping conv2/4/5 doubles their input channels per filter.
    assert params("alexnet_bvlc_nolrn") == params("alexnet_bvlc")
    extra = 48 * 256 * 5 * 5 + 192 * 384 * 3 * 3 + 192 * 256 * 3 * 3
    assert params("alexnet_bvlc_nogroup") == 60_965_224 + extra == 62_378_344
    assert params("alexnet_bvlc_plain") == params("alexnet_bvlc_nogroup")


# ---------------------------------------------------------------------------------------
# Parameter counts: hand arithmetic. A Dense(i, o) has i*o + o; a tied decoder only its
# bias, whose size is its encoder's input; AE phase k also counts the frozen encoders.

ENC1, ENC2, ENC3 = 784 * 400 + 400, 400 * 200 + 200, 200 * 100 + 100   # Table 5 sizes
L_ENC1, L_ENC2, L_ENC3 = 784 * 800 + 800, 800 * 1000 + 1000, 1000 * 2000 + 2000  # Table 7

HAND_PARAMS = {
    # name: (all parameters, trainable ones)
    "sae_ae1": (ENC1 + 784, ENC1 + 784),
    "sae_ae2": (ENC1 + ENC2 + 400, ENC2 + 400),
    "sae_ae3": (ENC1 + ENC2 + ENC3 + 200, ENC3 + 200),
    "sae_se": (ENC1 + ENC2 + ENC3 + 100 * 10 + 10,) * 2,
    "sae_large_ae1": (L_ENC1 + 784, L_ENC1 + 784),
    "sae_large_ae2": (L_ENC1 + L_ENC2 + 800, L_ENC2 + 800),
    "sae_large_ae3": (L_ENC1 + L_ENC2 + L_ENC3 + 1000, L_ENC3 + 1000),
    "sae_large_se": (L_ENC1 + L_ENC2 + L_ENC3 + 2000 * 10 + 10,) * 2,
    # LISA Lab lstm.py: embedding 10000x128, W (128, 512), U (128, 512), b (512),
    # classifier 128 -> 2.
    "lstm": (10_000 * 128 + 128 * 512 + 128 * 512 + 512 + 128 * 2 + 2,) * 2,
    # Single conv layers: c*f*k*k weights + f biases.
    "conv_l1": (3 * 96 * 11 * 11 + 96,) * 2,
    "conv_l2": (64 * 128 * 9 * 9 + 128,) * 2,
    "conv_l3": (128 * 128 * 9 * 9 + 128,) * 2,
    "conv_l4": (128 * 128 * 7 * 7 + 128,) * 2,
    "conv_l5": (384 * 384 * 3 * 3 + 384,) * 2,
    "li_conv2": (3 * 96 * 3 * 3 + 96,) * 2,
}


@pytest.mark.parametrize("name,expected", HAND_PARAMS.items())
def test_hand_counted_parameters(name, expected):
    stats = analyse(get_model(name))
    assert (stats.params, stats.trainable_params) == expected


def test_batch_norm_statistics_are_buffers_not_parameters():
    # ResNet-18's BN channels: stem 64, then per stage 2 blocks x 2 BNs x width plus a
    # downsample BN in stages 2-4: 64 + 256 + 640 + 1280 + 2560 = 4,800. torchvision's
    # count holds their gamma and beta but not their running mean and variance.
    stats = analyse(get_model("resnet18"))
    buffers = [s for s in stats.param_specs if not s.trainable]
    assert sum(s.size for s in buffers) == 2 * 4_800
    assert stats.params == 11_689_512


# ---------------------------------------------------------------------------------------
# FLOPs.

# torchvision's model docs list "GFLOPS" that are multiply-accumulates per 224x224 image
# (e.g. ResNet-50 4.09, as fvcore counts), rounded to two decimals.
TORCHVISION_GMACS = {
    "alexnet": 0.71, "vgg_a": 7.61, "vgg16": 15.47, "vgg19": 19.63, "resnet18": 1.81,
    "resnet34": 3.66, "resnet50": 4.09, "resnet101": 7.80, "resnet152": 11.51,
}


@pytest.mark.parametrize("name,expected", TORCHVISION_GMACS.items())
def test_flops_match_torchvision_figures(name, expected):
    assert round(gmacs(name), 2) == expected


def test_googlenet_flops_match_paper_budget():
    # Szegedy et al. 2015, sec. 1: "a computational budget of 1.5 billion multiply-adds
    # at inference time" -- a round figure, so allow 6%.
    assert gmacs("googlenet") == pytest.approx(1.5, rel=0.06)


def test_alexnet_flops_by_hand():
    # One weird trick AlexNet at 224: conv outputs 55, 27, 13, 13, 13 (Krizhevsky 2014).
    macs = (64 * 55 * 55 * 3 * 11 * 11 + 192 * 27 * 27 * 64 * 5 * 5
            + 384 * 13 * 13 * 192 * 9 + 256 * 13 * 13 * 384 * 9 + 256 * 13 * 13 * 256 * 9
            + 256 * 6 * 6 * 4096 + 4096 * 4096 + 4096 * 1000)
    assert analyse(get_model("alexnet")).flops == 2 * macs


# Models cheap enough for the numpy reference: every tiny variant and the small full ones.
TRACED = [*TINY, "lenet", "sae_ae1", "sae_ae3", "sae_se", "lstm", "conv_l5", "li_conv2"]


def _full_length_batch(model: ir.Model, n: int = 2) -> Batch:
    """A batch whose padded length is the model's max length, as the analysis assumes."""
    if model.input.kind != "tokens":
        return make_batch(model, n)
    steps = model.input.shape[0]
    tokens = np.random.default_rng(0).integers(1, model.input.vocab, (n, steps))
    return Batch(tokens, np.zeros(n, np.int32), np.array([steps] + [1] * (n - 1)))


@pytest.mark.parametrize("name", TRACED)
def test_layer_shapes_and_flops_match_reference_run(name):
    # The reference counts multiply-accumulates from its tensordot operands and takes
    # shapes from its arrays: a second route to every layer's numbers.
    model = get_model(name)
    batch = _full_length_batch(model)
    trace: list[ref.LayerTrace] = []
    ref.forward(model, canonical_weights(model), batch, trace=trace)
    stats = analyse(model)
    by_name = {info.name: info for info in stats.layers}
    containers = ("Residual", "Concat")  # recorded by the analysis, not leaves
    assert len(trace) == sum(1 for info in stats.layers if info.kind not in containers)
    for step in trace:
        info = by_name[step.name]
        assert info.out_shape == step.out_shape, step.name
        assert info.flops == 2 * step.macs // batch.size, step.name
    assert stats.flops == 2 * sum(step.macs for step in trace) // batch.size


# (H, kernel, stride, padding, ceil_mode): pooling geometries the zoo does not all use,
# including the ceil-mode window PyTorch drops because it would start in the padding.
POOL_GEOMETRIES = [(5, 2, 2, 1, True), (8, 3, 2, 0, True), (8, 3, 2, 1, True),
                   (7, 3, 2, 0, False), (10, 3, 3, 0, True), (9, 3, 2, 1, False)]


@pytest.mark.parametrize("size,kernel,stride,padding,ceil_mode", POOL_GEOMETRIES)
def test_pool_shapes_match_reference_run(size, kernel, stride, padding, ceil_mode):
    pool = ir.Pool2d("pool", "max", (kernel, kernel), (stride, stride), (padding, padding),
                     ceil_mode)
    model = ir.Model("p", "test", ir.InputSpec("image", (2, size, size)), (pool,),
                     ir.Loss("sum"))
    out = ref.forward(model, {}, make_batch(model, 1))
    assert analyse(model).output_shape == out.shape[1:]


def _torch_flops(torch, torch_forward, model: ir.Model) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    def param(name, shape):
        return torch.empty(shape, device="meta")

    shape = (1, *model.input.shape)
    x = (torch.empty(shape, dtype=torch.long, device="meta")
         if model.input.kind == "tokens" else torch.empty(shape, device="meta"))
    with FlopCounterMode(display=False) as counter:
        torch_forward(model, param, x)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", [*ZOO, *TINY])
def test_flops_match_torch_flop_counter(torch, torch_forward, name):
    # FlopCounterMode counts 2 FLOPs per multiply-accumulate of convolutions and matrix
    # products, like the analysis; on the meta device nothing is computed.
    model = get_model(name)
    assert analyse(model).flops == _torch_flops(torch, torch_forward, model)


# ---------------------------------------------------------------------------------------
# Shapes.

SHAPES = [
    ("alexnet", "pool5", (256, 6, 6)),            # torchvision: features end at 256x6x6
    ("alexnet_bvlc", "pool5", (256, 6, 6)),       # bvlc_alexnet: 227 -> 55 -> 27 -> 13 -> 6
    ("alexnet_bvlc", "conv1", (96, 55, 55)),
    ("overfeat", "pool5", (1024, 6, 6)),          # Sermanet et al. Table 1
    ("vgg16", "pool5", (512, 7, 7)),
    ("googlenet", "pool1", (64, 56, 56)),         # ceil mode: 112 -> 56, floor would give 55
    ("googlenet", "inception_3a", (256, 28, 28)),  # Szegedy et al. Table 1
    ("googlenet", "inception_4e", (832, 14, 14)),
    ("googlenet", "inception_5b", (1024, 7, 7)),
    ("resnet50", "maxpool", (64, 56, 56)),        # He et al. Table 1: conv2_x at 56x56
    ("resnet50", "layer4.2", (2048, 7, 7)),       # last bottleneck, conv5_x
    ("resnet18", "layer4.1", (512, 7, 7)),
    ("lenet", "pool2", (50, 4, 4)),
    ("lstm", "lstm", (100, 128)),
]


@pytest.mark.parametrize("name,layer_name,expected", SHAPES)
def test_layer_output_shapes(name, layer_name, expected):
    assert layer(name, layer_name).out_shape == expected


def test_every_model_analyses_to_its_loss_shape():
    for name in names(include_tiny=True):
        model = get_model(name)
        stats = analyse(model)
        if model.loss.kind == "softmax_xent":
            assert stats.output_shape == (model.loss.classes,), name
        assert stats.params > 0 and stats.flops > 0, name


# ---------------------------------------------------------------------------------------
# Validation.

IMAGE = ir.InputSpec("image", (3, 8, 8))


def _raises_naming(model: ir.Model, layer_name: str) -> str:
    with pytest.raises(ModelError) as error:
        analyse(model)
    assert f"'{layer_name}'" in str(error.value)
    return str(error.value)


def test_kernel_larger_than_input_is_an_error():
    _raises_naming(get_model("conv:c=3,i=8,f=4,k=11"), "conv")


def test_zero_stride_is_an_error_not_a_crash():
    _raises_naming(get_model("conv:c=3,i=8,f=4,k=3,s=0"), "conv")


def test_wrong_in_channels_is_an_error():
    body = (conv("a", 3, 8, 3), conv("b", 4, 8, 3))
    message = _raises_naming(ir.Model("m", "test", IMAGE, body, ir.Loss("sum")), "b")
    assert "(4, H, W)" in message


def test_duplicate_names_are_an_error():
    body = (conv("a", 3, 8, 3), relu("r"), relu("r"))
    _raises_naming(ir.Model("m", "test", IMAGE, body, ir.Loss("sum")), "r")


def test_duplicate_name_inside_a_residual_is_an_error():
    body = (ir.Residual("block", (conv("a", 3, 3, 3, 1, 1),), (conv("a", 3, 3, 1),)),)
    _raises_naming(ir.Model("m", "test", IMAGE, body, ir.Loss("sum")), "a")


def test_tied_dense_to_missing_layer_is_an_error():
    vector = ir.InputSpec("vector", (10,))
    body = (dense("enc", 10, 4), ir.TiedDense("dec", tied_to="encoder"))
    _raises_naming(ir.Model("m", "test", vector, body, ir.Loss("mse_reconstruction")), "dec")


def test_residual_shape_mismatch_is_an_error():
    body = (ir.Residual("block", (conv("a", 3, 4, 3, 1, 1),)),)
    _raises_naming(ir.Model("m", "test", IMAGE, body, ir.Loss("sum")), "block")


def test_lstm_must_feed_mean_over_time():
    tokens = ir.InputSpec("tokens", (5,), 10)
    body = (ir.Embedding("e", 10, 4), ir.LSTM("l", 4, 3), dense("d", 3, 2))
    _raises_naming(ir.Model("m", "test", tokens, body, softmax(2)), "d")


def test_loss_shape_mismatch_is_an_error():
    body = (ir.Flatten("f"), dense("d", 3 * 8 * 8, 5))
    with pytest.raises(ModelError, match="10-way"):
        analyse(ir.Model("m", "test", IMAGE, body, softmax(10)))


# ---------------------------------------------------------------------------------------
# The zoo's names.


def test_unknown_model_suggests_near_names_in_one_line():
    with pytest.raises(UnknownModel) as error:
        get_model("resnet5")
    message = str(error.value)
    assert "resnet50" in message and "\n" not in message
    assert not message.startswith(("'", '"'))  # not KeyError's quoted repr


def test_parametric_conv_layer():
    model = get_model("conv:c=3,i=128,f=64,k=11,s=1")
    stats = analyse(model)
    assert stats.input_shape == (3, 128, 128)
    assert stats.output_shape == (64, 118, 118)          # 128 - 11 + 1
    assert stats.params == 3 * 64 * 11 * 11 + 64
    assert stats.flops == 2 * 64 * 118 * 118 * 3 * 11 * 11
    padded = analyse(get_model("conv:c=3,i=9,f=4,k=3,s=2,p=1"))
    assert padded.output_shape == (4, 5, 5)              # (9 + 2 - 3) // 2 + 1


@pytest.mark.parametrize("bad", ["conv:c=3,i=128,f=64,k=11,x=1", "conv:c=3,i=128,f=64",
                                 "conv:c=3,i=big,f=64,k=3", "conv:", "conv:c=-3,i=8,f=4,k=3"])
def test_bad_parametric_conv_names(bad):
    with pytest.raises(UnknownModel) as error:
        get_model(bad)
    assert "\n" not in str(error.value) and bad in str(error.value)


def test_zoo_names_are_unique_and_match_model_names():
    all_names = names(include_tiny=True)
    assert len(all_names) == len(set(all_names))
    for name in all_names:
        assert get_model(name).name == name


# ---------------------------------------------------------------------------------------
# Canonical weights.


def _expected_shapes(model: ir.Model) -> dict[str, tuple[int, ...]]:
    """Canonical parameter shapes from node fields, written out independently of
    models.params: OIHW convs and patch embeddings, (in, out) dense, (in, 4H)/(H, 4H)/(4H,)
    LSTM, (dim, 3·dim) fused attention projection."""
    shapes: dict[str, tuple[int, ...]] = {}
    dense_in: dict[str, int] = {}
    vocab: dict[str, int] = {}
    for node in ir.all_nodes(model):
        n = node.name
        if isinstance(node, ir.Conv2d):
            shapes[f"{n}.weight"] = (node.out_channels, node.in_channels // node.groups,
                                     *node.kernel)
            if node.bias:
                shapes[f"{n}.bias"] = (node.out_channels,)
        elif isinstance(node, ir.Dense):
            dense_in[n] = node.in_features
            shapes[f"{n}.weight"] = (node.in_features, node.out_features)
            shapes[f"{n}.bias"] = (node.out_features,)
        elif isinstance(node, ir.TiedDense):
            if node.bias:
                shapes[f"{n}.bias"] = (vocab[node.tied_to] if node.table else dense_in[node.tied_to],)
        elif isinstance(node, ir.BatchNorm):
            for suffix in ("gamma", "beta", "running_mean", "running_var"):
                shapes[f"{n}.{suffix}"] = (node.num_features,)
        elif isinstance(node, ir.LayerNorm):
            shapes[f"{n}.gamma"] = shapes[f"{n}.beta"] = (node.features,)
        elif isinstance(node, ir.Embedding):
            vocab[n] = node.vocab
            shapes[f"{n}.table"] = (node.vocab, node.dim)
        elif isinstance(node, ir.PositionEmbedding):
            shapes[f"{n}.table"] = (node.positions, node.dim)
            if node.segments:
                shapes[f"{n}.segments"] = (node.segments, node.dim)
        elif isinstance(node, ir.PatchEmbedding):
            shapes[f"{n}.weight"] = (node.dim, node.in_channels, node.patch, node.patch)
            shapes[f"{n}.bias"] = (node.dim,)
            if node.class_token:
                shapes[f"{n}.class_token"] = (node.dim,)
        elif isinstance(node, ir.SelfAttention):
            shapes.update({f"{n}.qkv.weight": (node.dim, 3 * node.dim), f"{n}.qkv.bias": (3 * node.dim,),
                           f"{n}.out.weight": (node.dim, node.dim), f"{n}.out.bias": (node.dim,)})
        elif isinstance(node, ir.LSTM):
            h4 = 4 * node.hidden_size
            shapes.update({f"{n}.w_ih": (node.input_size, h4), f"{n}.w_hh": (node.hidden_size, h4),
                           f"{n}.bias": (h4,)})
    return shapes


@pytest.mark.parametrize("name", list(TINY) + ["sae_ae2", "lenet"])
def test_weights_have_canonical_shapes_and_dtype(name):
    model = get_model(name)
    weights = canonical_weights(model)
    assert {k: v.shape for k, v in weights.items()} == _expected_shapes(model)
    assert all(v.dtype == np.float32 and v.flags.c_contiguous for v in weights.values())
    assert all(np.isfinite(v).all() for v in weights.values())


def test_weights_are_deterministic_and_seeded():
    model = get_model("resnet_tiny")
    first, second = canonical_weights(model), canonical_weights(model)
    other = canonical_weights(model, seed=1)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
        assert not np.array_equal(first[key], other[key]), key


def test_weights_are_distinct_across_layers():
    # Two layers of the same shape (16 -> 16, 3x3) must still get different values.
    weights = canonical_weights(get_model("vgg_tiny"))
    assert weights["conv4_2.weight"].shape == weights["conv5_1.weight"].shape
    assert not np.array_equal(weights["conv4_2.weight"], weights["conv5_1.weight"])


def test_encoder_weights_are_shared_across_autoencoder_phases():
    # Bahrampour et al. 2016, 4.3: later phases and SE reuse the pre-trained encoders.
    sets = [canonical_weights(get_model(n)) for n in ("sae_ae1", "sae_ae2", "sae_se")]
    for key in ("enc1.weight", "enc1.bias"):
        np.testing.assert_array_equal(sets[0][key], sets[1][key])
        np.testing.assert_array_equal(sets[0][key], sets[2][key])
    assert "dec1.weight" not in sets[0]  # tied: the decoder has only its bias


def test_weight_init_scales():
    weights = canonical_weights(get_model("lenet"))
    # He normal: std sqrt(2 / fan_in), fan_in = 800 for ip1 (400,000 draws).
    assert weights["ip1.weight"].std() == pytest.approx(math.sqrt(2 / 800), rel=0.02)
    resnet = canonical_weights(get_model("resnet_tiny"))
    assert (resnet["conv1.bn.running_var"] > 0).all()


# ---------------------------------------------------------------------------------------
# Inputs.


@pytest.mark.parametrize("name", ["alexnet_tiny", "sae_tiny_ae2", "lstm", "lstm_tiny"])
def test_batches_are_deterministic(name):
    model = get_model(name)
    a, b, c = make_batch(model, 8), make_batch(model, 8), make_batch(model, 8, seed=1)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, c.x)
    for field in ("labels", "lengths"):
        if getattr(a, field) is not None:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_image_and_vector_batches():
    model = get_model("alexnet_tiny")
    batch = make_batch(model, 5)
    assert batch.x.shape == (5, 3, 67, 67) and batch.x.dtype == np.float32
    assert batch.labels.dtype == np.int32 and ((batch.labels >= 0) & (batch.labels < 10)).all()
    vector = make_batch(get_model("sae_ae1"), 5)
    assert vector.x.shape == (5, 784) and vector.labels is None
    assert ((vector.x >= 0) & (vector.x <= 1)).all()  # MNIST intensities


@pytest.mark.parametrize("name", ["lstm", "lstm_tiny"])
def test_token_batches_are_padded_to_their_longest_sequence(name):
    model = get_model(name)
    max_len, vocab = model.input.shape[0], model.input.vocab
    batch = make_batch(model, 64)
    lengths = batch.lengths
    assert batch.x.dtype == np.int32 and lengths.dtype == np.int32
    assert ((lengths >= 1) & (lengths <= max_len)).all()
    assert batch.x.shape == (64, lengths.max())
    valid = np.arange(batch.x.shape[1])[None, :] < lengths[:, None]
    assert (batch.x[~valid] == 0).all()
    assert ((batch.x[valid] >= 1) & (batch.x[valid] < vocab)).all()
    assert len(set(lengths.tolist())) > 1  # variable lengths, or masking goes untested
    # Padded to the batch's longest sequence, not to max_len (Bahrampour et al. 2016,
    # 4.4): small batches often have no sequence of the full length.
    small = [make_batch(model, 2, seed=seed) for seed in range(10)]
    assert all(b.x.shape[1] == b.lengths.max() for b in small)
    assert any(b.x.shape[1] < max_len for b in small)


# ---------------------------------------------------------------------------------------
# python -m models


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "models", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_json_covers_the_zoo():
    result = _cli("--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [row["name"] for row in rows] == names()
    by_name = {row["name"]: row for row in rows}
    assert by_name["resnet50"]["params"] == 25_557_032
    assert by_name["resnet50"]["input_shape"] == [3, 224, 224]


def test_cli_unknown_model_is_one_line_exit_2():
    result = _cli("resnet5")
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "resnet50" in result.stderr and "Traceback" not in result.stderr


def test_cli_invalid_layer_is_one_line_exit_2():
    result = _cli("conv:c=3,i=8,f=4,k=3,s=0")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
