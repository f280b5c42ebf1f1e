"""The optimizer of ``train_step`` (models/measures.py), declared once, framework-free: its
hyper-parameters, which network trains with which (``optimizer_for``), and a float64
update that the tests use as the reference for each framework's own optimizer.

Each adapter maps the declared optimizer to its framework's implementation
(``torch.optim.SGD`` / ``torch.optim.AdamW``, ``optax.sgd`` / ``optax.adamw``,
``keras.optimizers.SGD`` / ``keras.optimizers.AdamW``) and records in the row which one ran.

The time of an update does not depend on its hyper-parameters; they are fixed so that every
framework computes the same update, and chosen so that the timed loop, which trains on one
batch with random labels for thousands of iterations, keeps the weights finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A state entry per parameter: the optimizer's buffers for it (SGD: the momentum buffer;
# AdamW: the first and second moments).
State = dict[str, tuple[np.ndarray, ...]]
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class SGDMomentum:
    """Plain SGD with heavy-ball momentum, no Nesterov, no weight decay, a constant rate
    (He et al. 2016, 3.4, ResNet's recipe): b <- m*b + g, w <- w - lr*b, so the first step
    is w - lr*g. Every framework's SGD computes this update (Keras keeps v = -lr*b, the
    same for a constant rate)."""

    learning_rate: float
    momentum: float

    def describe(self) -> str:
        return f"SGD lr={self.learning_rate:g} momentum={self.momentum:g} (heavy ball, no decay)"

    def update(self, weights: Arrays, grads: Arrays, state: State | None,
               step: int) -> tuple[Arrays, State]:
        """Step ``step`` (1, 2, ...) in float64: the new weights and state."""
        del step  # a constant rate: the update does not depend on the step
        new_w, new_state = {}, {}
        for name, g in grads.items():
            g = np.asarray(g, np.float64)
            (b,) = state[name] if state else (np.zeros_like(g),)
            b = self.momentum * b + g
            new_w[name] = np.asarray(weights[name], np.float64) - self.learning_rate * b
            new_state[name] = (b,)
        return new_w, new_state


@dataclass(frozen=True)
class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay
    Regularization", Algorithm 2, with the schedule multiplier fixed at 1), as
    ``torch.optim.AdamW`` and ``optax.adamw`` compute it and Keras's ``AdamW`` up to where
    it adds epsilon (``update``'s ``epsilon_hat``):

        w <- w - lr*wd*w                              (decay of the pre-update weights)
        m <- b1*m + (1-b1)*g,  v <- b2*v + (1-b2)*g^2
        w <- w - lr * m_hat / (sqrt(v_hat) + eps),   m_hat = m/(1-b1^t), v_hat = v/(1-b2^t)

    Weight decay applies to every trainable parameter (biases, LayerNorm's scale and shift
    and embeddings included): the frameworks' defaults, and one set that is the same
    everywhere. Each weight's step is about lr in size whatever its gradient's scale
    (|m_hat/sqrt(v_hat)| <= 1 at the first step), which is why a transformer's training
    uses it rather than SGD."""

    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float

    def describe(self) -> str:
        return (f"AdamW lr={self.learning_rate:g} betas=({self.beta1:g}, {self.beta2:g}) "
                f"eps={self.eps:g} wd={self.weight_decay:g} (decoupled, every parameter)")

    def update(self, weights: Arrays, grads: Arrays, state: State | None, step: int,
               epsilon_hat: bool = False) -> tuple[Arrays, State]:
        """Step ``step`` (1, 2, ...) in float64: the new weights and state.
        ``epsilon_hat``: epsilon added to sqrt(v) before the bias correction, the
        "efficient" ordering of Kingma & Ba 2015, end of section 2 (alpha_t = lr *
        sqrt(1-b2^t)/(1-b1^t), w <- w - alpha_t*m/(sqrt(v) + eps)), which Keras computes;
        it equals m_hat/(sqrt(v_hat) + eps/sqrt(1-b2^t)): a larger epsilon in the first
        steps (3.2e-7 at t=1 for eps=1e-8, b2=0.999)."""
        lr, b1, b2 = self.learning_rate, self.beta1, self.beta2
        eps = self.eps / np.sqrt(1 - b2 ** step) if epsilon_hat else self.eps
        new_w, new_state = {}, {}
        for name, g in grads.items():
            g = np.asarray(g, np.float64)
            m, v = state[name] if state else (np.zeros_like(g), np.zeros_like(g))
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            m_hat, v_hat = m / (1 - b1 ** step), v / (1 - b2 ** step)
            w = np.asarray(weights[name], np.float64)
            new_w[name] = w * (1 - lr * self.weight_decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
            new_state[name] = (m, v)
        return new_w, new_state


Optimizer = SGDMomentum | AdamW

# The CNNs', autoencoders' and LSTM's optimizer (their published train_step rows were
# measured with it). The rate is ten times below He et al.'s starting 0.1: the timed loop
# trains on one batch with random labels for thousands of iterations, and a smaller rate
# keeps the weights finite.
SGD = SGDMomentum(learning_rate=0.01, momentum=0.9)

# The transformers' optimizer (issue #60: each framework's own AdamW, the same
# hyper-parameters everywhere): BERT's pre-training recipe (Devlin et al. 2019, A.2: Adam
# with lr 1e-4, b1 0.9, b2 0.999, L2 weight decay 0.01, which their code's
# AdamWeightDecayOptimizer applies decoupled, as AdamW) at a constant rate (no warm-up or
# decay: the time of an update does not depend on its rate). eps 1e-8: Kingma & Ba's, and
# the default of torch.optim.AdamW, optax.adamw and Hugging Face's Trainer (BERT's code had
# 1e-6). BERT's code exempts biases and LayerNorm from the decay; here every parameter
# decays, each framework's default, so that the decayed set is the same everywhere. Adam's
# step per weight is about lr, at most lr*(1-b1)/sqrt(1-b2) = 3.2*lr (Kingma & Ba 2015,
# 2.1), whatever the gradients, so T timed iterations move a weight by at most 3.2e-4*T
# (typically about 1e-4*T): the weights stay finite however the random labels drive them.
ADAMW = AdamW(learning_rate=1e-4, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01)

# Which optimizer each network family trains with (models/ir.py Model.family). A family
# missing here is an error (``optimizer_for``), and tests/models checks the whole zoo.
BY_FAMILY: dict[str, Optimizer] = {
    "lenet": SGD,
    "alexnet": SGD,
    "overfeat": SGD,
    "vgg": SGD,
    "googlenet": SGD,
    "resnet": SGD,
    "autoencoder": SGD,
    "lstm": SGD,
    "conv_layer": SGD,
    "layer_norm": SGD,
    "transformer": ADAMW,
}


class NoOptimizer(KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; keep it one plain line
        return str(self.args[0])


def optimizer_for(model) -> Optimizer:
    """The optimizer ``model`` (a models.ir.Model) trains with in ``train_step``."""
    try:
        return BY_FAMILY[model.family]
    except KeyError:
        raise NoOptimizer(f"model '{model.name}': family '{model.family}' declares no "
                          f"optimizer (models/optimizers.py BY_FAMILY)") from None
