"""Shared fixtures. Torch is optional: tests that need it take the ``torch`` fixture
and are skipped, with the reason, where it is not installed.

``torch_forward`` runs an IR model with ``torch.nn.functional`` only. It is a second,
independent reading of the IR (weight shapes derived from node fields here, not from
``models.params``), used to check the numpy reference end to end and, on the ``meta``
device, to count FLOPs with ``torch.utils.flop_counter``. It is not an adapter: no
modules, no speed, nothing an adapter should copy.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from models import ir


@pytest.fixture
def stand_in_gpu(tmp_path, monkeypatch) -> dict[str, str]:
    """The stand-in frameworks on the stand-in GPU (tests/fake_framework.py), for this
    process and the workers it starts; its device clock is the adapter's (CUPTI is never
    loaded)."""
    from tests.fake_framework import EVENTS, GPU_LOCK, REGISTRY
    env = {"DLBENCH_REGISTRY": str(REGISTRY), "DLBENCH_TRUTH": "off",
           "DLBENCH_DEVICE_CLOCK": "adapter", GPU_LOCK: str(tmp_path / "gpu.lock"),
           EVENTS: str(tmp_path / "events")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture
def torch_forward(torch):
    return _torch_forward


# param(name, shape) -> tensor: canonical weights, or empty meta tensors for counting.
ParamFn = Callable[[str, tuple[int, ...]], "torch.Tensor"]


def _torch_forward(model: ir.Model, param: ParamFn, x, lengths=None, train: bool = False):
    """(body input, body output) of ``model`` on ``x``. ``lengths`` None means every step
    of a sequence is valid."""
    import torch
    import torch.nn.functional as F

    encoders: dict[str, tuple[int, int]] = {}  # Dense name -> (in, out), for TiedDense
    tables: dict[str, tuple[int, int]] = {}    # Embedding name -> (vocab, dim), likewise

    def attention(node: ir.SelfAttention, h):
        # Written out rather than through scaled_dot_product_attention: the PyTorch
        # adapter uses that, and this is the independent statement it is checked against.
        d, heads = node.dim, node.heads
        qkv = h @ param(f"{node.name}.qkv.weight", (d, 3 * d)) + param(f"{node.name}.qkv.bias", (3 * d,))
        q, k, v = (part.unflatten(-1, (heads, d // heads)).transpose(1, 2)
                   for part in qkv.chunk(3, dim=-1))
        scores = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
        steps = h.shape[1]
        allowed = torch.ones(steps, steps, dtype=torch.bool, device=h.device)
        if node.causal:
            allowed = torch.tril(allowed)
        allowed = allowed[None, None]
        if node.padding and lengths is not None:
            keys = torch.arange(steps)[None, :] < lengths[:, None]
            allowed = allowed & keys[:, None, None, :]
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        out = (weights @ v).transpose(1, 2).flatten(2)
        return out @ param(f"{node.name}.out.weight", (d, d)) + param(f"{node.name}.out.bias", (d,))

    def sequence(nodes, h):
        for node in nodes:
            h = run(node, h)
        return h

    def lstm(node: ir.LSTM, h):
        hidden = node.hidden_size
        w_ih = param(f"{node.name}.w_ih", (node.input_size, 4 * hidden))
        w_hh = param(f"{node.name}.w_hh", (hidden, 4 * hidden))
        bias = param(f"{node.name}.bias", (4 * hidden,))
        state = h.new_zeros((h.shape[0], hidden))
        cell = h.new_zeros((h.shape[0], hidden))
        outputs = []
        for t in range(h.shape[1]):
            i, f, g, o = (h[:, t] @ w_ih + state @ w_hh + bias).chunk(4, dim=1)
            new_cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
            new_state = torch.sigmoid(o) * torch.tanh(new_cell)
            if lengths is not None:
                live = (t < lengths)[:, None]
                new_cell = torch.where(live, new_cell, cell)
                new_state = torch.where(live, new_state, state)
            state, cell = new_state, new_cell
            outputs.append(state)
        return torch.stack(outputs, dim=1)

    def run(node, h):
        name = node.name
        if isinstance(node, ir.Residual):
            return sequence(node.body, h) + (sequence(node.shortcut, h) if node.shortcut else h)
        if isinstance(node, ir.Concat):
            return torch.cat([sequence(branch, h) for branch in node.branches], dim=1)
        if isinstance(node, ir.Conv2d):
            weight = param(f"{name}.weight", (node.out_channels,
                                              node.in_channels // node.groups, *node.kernel))
            bias = param(f"{name}.bias", (node.out_channels,)) if node.bias else None
            return F.conv2d(h, weight, bias, node.stride, node.padding, 1, node.groups)
        if isinstance(node, ir.Pool2d):
            if node.kind == "max":
                return F.max_pool2d(h, node.kernel, node.stride, node.padding,
                                    ceil_mode=node.ceil_mode)
            return F.avg_pool2d(h, node.kernel, node.stride, node.padding,
                                ceil_mode=node.ceil_mode)
        if isinstance(node, ir.GlobalAvgPool):
            return F.adaptive_avg_pool2d(h, 1).flatten(1)
        if isinstance(node, ir.Activation):
            if node.kind.startswith("gelu"):
                return F.gelu(h, approximate="tanh" if node.kind == "gelu_tanh" else "none")
            return {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}[node.kind](h)
        if isinstance(node, ir.LRN):
            return F.local_response_norm(h, node.size, node.alpha, node.beta, node.k)
        if isinstance(node, ir.BatchNorm):
            c = (node.num_features,)
            # Clones: training-mode batch_norm updates the running statistics in place.
            return F.batch_norm(h, param(f"{name}.running_mean", c).clone(),
                                param(f"{name}.running_var", c).clone(),
                                param(f"{name}.gamma", c), param(f"{name}.beta", c),
                                training=train, eps=node.eps)
        if isinstance(node, ir.LayerNorm):
            f = (node.features,)
            return F.layer_norm(h, f, param(f"{name}.gamma", f), param(f"{name}.beta", f),
                                eps=node.eps)
        if isinstance(node, ir.Dense):
            encoders[name] = (node.in_features, node.out_features)
            y = h @ param(f"{name}.weight", (node.in_features, node.out_features))
            return y + param(f"{name}.bias", (node.out_features,)) if node.bias else y
        if isinstance(node, ir.TiedDense):
            if node.table:
                vocab, dim = tables[node.tied_to]
                y = h @ param(f"{node.tied_to}.table", (vocab, dim)).T
                return y + param(f"{name}.bias", (vocab,)) if node.bias else y
            fin, fout = encoders[node.tied_to]
            y = h @ param(f"{node.tied_to}.weight", (fin, fout)).T
            return y + param(f"{name}.bias", (fin,)) if node.bias else y
        if isinstance(node, ir.Dropout):
            return h
        if isinstance(node, ir.Flatten):
            return h.flatten(1)
        if isinstance(node, ir.Embedding):
            tables[name] = (node.vocab, node.dim)
            return F.embedding(h, param(f"{name}.table", (node.vocab, node.dim)))
        if isinstance(node, ir.PositionEmbedding):
            rows = param(f"{name}.table", (node.positions, node.dim))[:h.shape[1]]
            if node.segments:
                rows = rows + param(f"{name}.segments", (node.segments, node.dim))[0]
            return h + rows
        if isinstance(node, ir.PatchEmbedding):
            p = node.patch
            y = F.conv2d(h, param(f"{name}.weight", (node.dim, node.in_channels, p, p)),
                         param(f"{name}.bias", (node.dim,)), stride=p).flatten(2).transpose(1, 2)
            if not node.class_token:
                return y
            token = param(f"{name}.class_token", (node.dim,)).expand(y.shape[0], 1, node.dim)
            return torch.cat([token, y], dim=1)
        if isinstance(node, ir.SelfAttention):
            return attention(node, h)
        if isinstance(node, ir.FirstToken):
            return h[:, 0]
        if isinstance(node, ir.LSTM):
            return lstm(node, h)
        if isinstance(node, ir.MeanOverTime):
            if lengths is None:
                return h.mean(dim=1)
            valid = (torch.arange(h.shape[1])[None, :] < lengths[:, None])[..., None]
            return torch.where(valid, h, 0.0).sum(dim=1) / lengths[:, None]
        raise TypeError(f"no torch rule for {type(node).__name__}")

    body_input = sequence(model.frozen, x)
    return body_input, sequence(model.body, body_input)
