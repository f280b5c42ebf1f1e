"""The sentiment LSTM of Bahrampour et al. (2016, 4.4), which is LISA Lab's Theano
tutorial ``lstm.py``: word embedding → LSTM → mean of the outputs over the valid steps →
dense → 2-way softmax. The tutorial's defaults give the sizes: 10,000 words, 128-wide
embedding and hidden state, reviews cut at 100 words (``maxlen=100``). Batches are padded
to their longest sequence and carry per-sequence lengths (the mask)."""

from __future__ import annotations

from functools import partial

from models import ir
from models.layers import dense, softmax


def lstm_sentiment(vocab: int = 10_000, dim: int = 128, hidden: int = 128,
                   max_len: int = 100, classes: int = 2, name: str = "lstm") -> ir.Model:
    body = (ir.Embedding("embedding", vocab, dim), ir.LSTM("lstm", dim, hidden),
            ir.MeanOverTime("mean"), dense("classifier", hidden, classes))
    return ir.Model(name, "lstm", ir.InputSpec("tokens", (max_len,), vocab), body,
                    softmax(classes),
                    description="LSTM sentiment classifier (IMDB, LISA Lab tutorial)",
                    source="Bahrampour et al. 2016, 4.4 and Table 6; LISA Lab lstm.py")


lstm_tiny = partial(lstm_sentiment, vocab=50, dim=6, hidden=5, max_len=7, name="lstm_tiny")
