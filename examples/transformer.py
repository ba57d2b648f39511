"""A small character-level transformer (65 characters, windows of 32), written as a user of
trickbench writes one. Measure the training tricks on it with

    trickbench run --model examples/transformer.py

and, training to 60% next-token accuracy on its dataset(), the time-to-accuracy tricks with

    trickbench run --model examples/transformer.py --target 0.6 --tricks convergence
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, WIDTH, HEADS = 65, 32, 64, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(Block(), Block())
        self.ln, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def model():
    """The network trickbench trains."""
    return CharTransformer()


def batch(batch_size):
    """One batch: windows of random token ids, and for each position the token that follows."""
    text = torch.randint(0, VOCAB, (batch_size, CONTEXT + 1))
    return text[:, :-1], text[:, 1:]


def dataset():
    """Training and test windows of counting sequences: each counts up from a random token by a
    random step of 1 to 3, modulo the vocabulary, so that after its first tokens each next one
    can be predicted."""

    def windows(n):
        start, step = torch.randint(0, VOCAB, (n, 1)), torch.randint(1, 4, (n, 1))
        text = (start + step * torch.arange(CONTEXT + 1)) % VOCAB
        return text[:, :-1], text[:, 1:]

    return windows(4096), windows(512)
