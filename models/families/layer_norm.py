"""A small token classifier with layer normalisation (Ba et al. 2016) on both kinds of
input it takes: each step of a sequence, after the embedding, and a vector, after a
dense layer. Embedding → LayerNorm → mean over the valid steps → dense → LayerNorm →
tanh → dense → softmax. It exists so that every adapter's LayerNorm is checked against
the float64 reference; tanh rather than ReLU keeps the gradients judged
(models/error_bounds.py)."""

from __future__ import annotations

from models import ir
from models.layers import dense, softmax


def layer_norm_classifier(vocab: int = 50, dim: int = 8, hidden: int = 12, max_len: int = 7,
                          classes: int = 3, name: str = "layernorm_tiny") -> ir.Model:
    body = (ir.Embedding("embedding", vocab, dim), ir.LayerNorm("embedding.norm", dim),
            ir.MeanOverTime("mean"), dense("hidden", dim, hidden),
            ir.LayerNorm("hidden.norm", hidden), ir.Activation("hidden.tanh", "tanh"),
            dense("classifier", hidden, classes))
    return ir.Model(name, "layer_norm", ir.InputSpec("tokens", (max_len,), vocab), body,
                    softmax(classes),
                    description="token classifier with LayerNorm on steps and on vectors",
                    source="Ba et al. 2016, Layer Normalization (arXiv:1607.06450)")
