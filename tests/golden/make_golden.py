#!/usr/bin/python3
"""Write the golden file for cnn_train's CPU (and GPU) step tests with PyTorch.

The MNIST Net of the PyTorch examples, dropout off, parameters and a batch
of 8 images filled from an integer hash that tests/unit/test_cnn.c computes
identically, so only results are stored (a few KB), not 1.2M weights.

    /usr/bin/python3 tests/golden/make_golden.py > tests/golden/net_step.golden
"""
import sys

import os

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "contrib", "pytorch"))
from train_ddp import Net  # noqa: E402  (the one definition of the model; eval() turns dropout off)


def hashed(n, salt):
    """Values in [-1, 1): ((i + salt*1000003) * 2654435761 mod 2^32) >> 8, over 2^23, minus 1.
    Exact in float32 (24-bit integers), the same in C."""
    i = np.arange(n, dtype=np.uint64)
    u = ((i + np.uint64(salt * 1000003)) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    k = (u >> np.uint64(8)).astype(np.float32)
    return k / np.float32(2 ** 23) - np.float32(1.0)


def fill(model):
    """Parameter t (in named_parameters order) = hashed(n, 100+t) * 1/sqrt(fan_in), in float32."""
    fan_in = [9, 9, 288, 288, 9216, 9216, 128, 128]
    with torch.no_grad():
        for t, (name, p) in enumerate(model.named_parameters()):
            bound = np.float32(1.0) / np.sqrt(np.float32(fan_in[t]))
            v = hashed(p.numel(), 100 + t) * np.float32(bound)
            p.copy_(torch.from_numpy(v.astype(np.float32)).reshape(p.shape))


def samples(n):
    return [j * n // 8 for j in range(8)]


def fmt(xs):
    return " ".join(f"{float(x):.9g}" for x in xs)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    x = torch.from_numpy(hashed(8 * 784, 7) * np.float32(2.0)).reshape(8, 1, 28, 28)
    y = torch.tensor([i % 10 for i in range(8)])
    out = sys.stdout
    out.write("# cnn_train golden file: the PyTorch examples MNIST Net (dropout off) on a\n")
    out.write("# hashed batch of 8 images, see tests/golden/make_golden.py.\n")
    out.write(f"# written by PyTorch {torch.__version__}; regenerate with\n")
    out.write("#   /usr/bin/python3 tests/golden/make_golden.py > tests/golden/net_step.golden\n")
    out.write("version 1\n")

    model = Net().eval()
    fill(model)
    logp = model(x)
    loss = F.nll_loss(logp, y)
    loss.backward()
    out.write(f"loss {loss.item():.9g}\n")
    out.write(f"logp0 {fmt(logp[0].tolist())}\n")
    for name, p in model.named_parameters():
        g = p.grad.flatten()
        out.write(f"grad {name} {g.sum().item():.9g} {g.abs().sum().item():.9g} "
                  f"{fmt(g[samples(g.numel())].tolist())}\n")

    for optname, make in (("sgd", lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4)),
                          ("adadelta", lambda ps: torch.optim.Adadelta(ps, lr=1.0, weight_decay=1e-4))):
        model = Net().eval()
        fill(model)
        opt = make(model.parameters())
        for step in range(3):
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
        with torch.no_grad():
            loss = F.nll_loss(model(x), y)
        out.write(f"{optname}_loss3 {loss.item():.9g}\n")
        for name, p in model.named_parameters():
            v = p.detach().flatten()
            out.write(f"{optname}_param {name} {fmt(v[samples(v.numel())].tolist())}\n")


if __name__ == "__main__":
    main()
