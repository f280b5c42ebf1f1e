"""Model names: which table family a model belongs to, canonical order, and the parametric
convolution names of Li et al.'s sweeps (``conv:c=3,i=128,f=64,k=11,s=1``)."""

from __future__ import annotations

import re

# Order of the seeds' own tables (cnn-benchmarks, then convnet-benchmarks, Bahrampour).
ORDER = ("alexnet_bvlc", "googlenet", "vgg16", "vgg19", "resnet18", "resnet34", "resnet50",
         "resnet101", "resnet152", "resnet200", "alexnet", "overfeat", "vgg_a", "lenet",
         "alexnet_bvlc_nolrn", "alexnet_bvlc_nogroup", "alexnet_bvlc_plain", "lstm")

# convnet-benchmarks' layer-wise table (seed 000) and Li et al.'s Table I (seed 003).
LAYER_SETS = {
    "convnet-benchmarks layers L1–L5": (("conv_l1", "L1"), ("conv_l2", "L2"), ("conv_l3", "L3"),
                                        ("conv_l4", "L4"), ("conv_l5", "L5")),
    "Li et al. Table I layers Conv1–Conv5": (("li_conv1", "Conv1"), ("li_conv2", "Conv2"),
                                             ("li_conv3", "Conv3"), ("li_conv4", "Conv4"),
                                             ("li_conv5", "Conv5")),
}
LAYER_MODELS = {m for layers in LAYER_SETS.values() for m, _ in layers}

# Bahrampour et al.'s stacked autoencoder phases (Tables 5 and 7): prefix -> title.
SAE_SETS = {"sae": "Table 5 (encoders 400-200-100)", "sae_large": "Table 7 (encoders 800-1000-2000)"}
SAE_PHASES = ("ae1", "ae2", "ae3", "se")
SAE_MODELS = {f"{p}_{ph}" for p in SAE_SETS for ph in SAE_PHASES}

# Bahrampour Tables 3, 4, 6: model groups shown in one table each.
BAHRAMPOUR_SETS = {
    "Table 3: LeNet": ("lenet",),
    "Table 4: AlexNet (BVLC)": ("alexnet_bvlc", "alexnet_bvlc_nolrn", "alexnet_bvlc_nogroup",
                                "alexnet_bvlc_plain"),
    "Table 6: LSTM": ("lstm",),
}

CONV_KEYS = ("c", "i", "f", "k", "s", "p")
_CONV = re.compile(r"^conv:([a-z]=\d+)(,[a-z]=\d+)*$")


def parse_conv(name: str) -> dict[str, int] | None:
    """``conv:c=3,i=128,f=64,k=11,s=1`` → {c, i, f, k, s, p}; None if not parametric."""
    if not _CONV.match(name):
        return None
    values = dict(item.split("=") for item in name[len("conv:"):].split(","))
    if not {"c", "i", "f", "k"} <= set(values) or not set(values) <= set(CONV_KEYS):
        return None
    out = {k: int(v) for k, v in values.items()}
    out.setdefault("s", 1)
    out.setdefault("p", 0)
    return out


def is_detail_model(name: str) -> bool:
    """Models that get a cnn-benchmarks per-model table (whole networks)."""
    return name not in LAYER_MODELS and name not in SAE_MODELS and parse_conv(name) is None


def sort_key(name: str) -> tuple:
    return (ORDER.index(name) if name in ORDER else len(ORDER), name)
