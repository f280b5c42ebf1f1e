"""The model zoo: every name a suite may use, and the small variant of each family that
the conformance kit runs.

Besides the fixed names, single convolution layers are parametric:
``conv:c=3,i=128,f=64,k=11,s=1`` (channels, input size, filters, kernel, stride and an
optional padding ``p``), which Li et al.'s one-parameter sweeps need.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from models.families import (
    alexnet,
    autoencoder,
    conv_layers,
    googlenet,
    layer_norm,
    lenet,
    lstm,
    overfeat,
    resnet,
    transformer,
    vgg,
)
from models.ir import Model

Factory = Callable[[], Model]

ZOO: dict[str, Factory] = {
    "lenet": lenet.lenet,
    "alexnet": alexnet.alexnet,
    "alexnet_bvlc": alexnet.alexnet_bvlc,
    "alexnet_bvlc_nolrn": lambda: alexnet.alexnet_bvlc(lrn=False, name="alexnet_bvlc_nolrn"),
    "alexnet_bvlc_nogroup": lambda: alexnet.alexnet_bvlc(grouped=False,
                                                         name="alexnet_bvlc_nogroup"),
    "alexnet_bvlc_plain": alexnet.alexnet_bvlc_plain,
    "overfeat": overfeat.overfeat,
    "vgg_a": vgg.vgg_a,
    "vgg16": vgg.vgg16,
    "vgg19": vgg.vgg19,
    "googlenet": googlenet.googlenet,
    "resnet18": resnet.resnet18,
    "resnet34": resnet.resnet34,
    "resnet50": resnet.resnet50,
    "resnet101": resnet.resnet101,
    "resnet152": resnet.resnet152,
    "resnet200": resnet.resnet200,
    "sae_ae1": autoencoder.sae_ae1,
    "sae_ae2": autoencoder.sae_ae2,
    "sae_ae3": autoencoder.sae_ae3,
    "sae_se": autoencoder.sae_se,
    "sae_large_ae1": autoencoder.sae_large_ae1,
    "sae_large_ae2": autoencoder.sae_large_ae2,
    "sae_large_ae3": autoencoder.sae_large_ae3,
    "sae_large_se": autoencoder.sae_large_se,
    "lstm": lstm.lstm_sentiment,
    "gpt2": transformer.gpt2,
    "bert_base": transformer.bert,
    "bert_base_qa": transformer.bert_qa,
    "vit_b16": transformer.vit,
    **conv_layers.LAYERS,
}

# One small variant per family (and per distinct structure within a family): the
# conformance kit's models. They keep every node kind of their family.
TINY: dict[str, Factory] = {
    "lenet_tiny": lenet.lenet_tiny,
    "alexnet_tiny": alexnet.alexnet_tiny,
    "alexnet_bvlc_tiny": alexnet.alexnet_bvlc_tiny,
    "overfeat_tiny": overfeat.overfeat_tiny,
    "vgg_tiny": vgg.vgg_tiny,
    "googlenet_tiny": googlenet.googlenet_tiny,
    "resnet_tiny": resnet.resnet_tiny,
    "resnet_basic_tiny": lambda: resnet.resnet(stages=(1, 1), bottleneck=False, widths=(4, 8),
                                               stem=4, size=24, classes=10,
                                               name="resnet_basic_tiny"),
    "sae_tiny_ae2": autoencoder.sae_tiny_ae2,
    "sae_tiny_se": autoencoder.sae_tiny_se,
    "lstm_tiny": lstm.lstm_tiny,
    "conv_tiny": conv_layers.conv_tiny,
    "layernorm_tiny": layer_norm.layer_norm_classifier,
    "gpt2_tiny": transformer.gpt2_tiny,
    "bert_tiny": transformer.bert_tiny,
    "vit_tiny": transformer.vit_tiny,
}

_CONV_KEYS = {"c": "channels", "i": "size", "f": "filters", "k": "kernel", "s": "stride",
              "p": "padding"}


class UnknownModel(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it one plain line
        return str(self.args[0])


def names(include_tiny: bool = False) -> list[str]:
    return list(ZOO) + (list(TINY) if include_tiny else [])


def get_model(name: str) -> Model:
    """The model called ``name``; ``UnknownModel`` names the problem and near matches."""
    if name in ZOO:
        return ZOO[name]()
    if name in TINY:
        return TINY[name]()
    if name.startswith("conv:"):
        return _parametric_conv(name)
    if name.split(":", 1)[0] in _AT_LENGTH and ":" in name:
        return _transformer_at_length(name)
    close = difflib.get_close_matches(name, names(include_tiny=True), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UnknownModel(f"unknown model '{name}'{hint}; `python -m models` lists the zoo")


# Transformers at another sequence length: "gpt2:s=4096", "bert_base:s=128",
# "bert_base_qa:s=384" (MLPerf Inference's BERT).
_AT_LENGTH = ("gpt2", "bert_base", "bert_base_qa")


def _transformer_at_length(name: str) -> Model:
    family, _, spec = name.partition(":")
    key, _, value = spec.partition("=")
    if key != "s" or not value.isdigit() or int(value) < 1:
        raise UnknownModel(f"bad model '{name}': expected {family}:s=<steps>, a positive "
                           f"sequence length")
    return transformer.at_length(family, int(value), name)


def _parametric_conv(name: str) -> Model:
    kwargs: dict[str, int] = {}
    for item in name[len("conv:"):].split(","):
        key, _, value = item.partition("=")
        if key not in _CONV_KEYS or not value.isdigit():
            raise UnknownModel(f"bad conv layer '{name}': expected keys "
                               f"{','.join(_CONV_KEYS)} with integer values, got '{item}'")
        kwargs[_CONV_KEYS[key]] = int(value)
    missing = {"c", "i", "f", "k"} - {k for k, v in _CONV_KEYS.items() if v in kwargs}
    if missing:
        raise UnknownModel(f"bad conv layer '{name}': missing {','.join(sorted(missing))}")
    return conv_layers.conv_layer(**kwargs, name=name)
