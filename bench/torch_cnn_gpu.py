#!/usr/bin/env python3
"""PyTorch's side of bench/gpu_vs_torch.sh: the same Net (contrib/pytorch/
train_ddp.py), data (Fashion-MNIST, the whole set in GPU memory, batches
gathered there by index as cnn_train does), optimizer (SGD, lr 0.05,
momentum 0.9), batch size and precision as cnn_train --device cuda, on one
GPU (bf16: torch.autocast to bfloat16 around the forward and loss, fp32
parameters and optimizer, as cnn_train --precision bf16), in one of three
modes:

  eager    the usual loop
  compile  torch.compile of the whole step: the forward and loss, the
           backward (through compiled autograd, where PyTorch has it: 2.4
           and later; else AOTAutograd's backward of the forward's graph)
           and the optimizer's step (Inductor fuses SGD's update itself), in
           --compile-mode default, reduce-overhead (CUDA graphs) or
           max-autotune (Triton's kernels timed against each other, and
           CUDA graphs)
  graph    the whole step (forward, backward, optimizer) captured once with
           torch.cuda.graph and replayed, as cnn_train does

--channels-last puts the parameters and the data in NHWC
(torch.channels_last), where cuDNN's convolutions may run faster.  The
first 10 steps (20 for compile) are warm-up and not timed; timing is
between two torch.cuda.synchronize() calls.  Prints `images_per_sec X` and,
after whole epochs, `test_accuracy Y`.  `--device cpu` runs the eager mode on
the CPU: a dry run of bench/gpu_vs_torch.sh's plumbing (DEVICE=cpu), not a
figure to compare."""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contrib", "pytorch"))
from train_ddp import Net, read_idx  # noqa: E402  (one definition of the model)


def load(data_dir, prefix, dev):
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1).to(dev)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST mean/std, as cnn_train computes them
    return x, torch.from_numpy(y.astype(np.int64)).to(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=os.environ.get("DDP_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "graph"])
    ap.add_argument("--compile-mode", default="default", choices=["default", "reduce-overhead", "max-autotune"],
                    help="torch.compile's mode (--mode compile)")
    ap.add_argument("--channels-last", action="store_true", help="parameters and data in NHWC")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: whole epochs)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--precision", default="tf32", choices=["tf32", "fp32", "bf16"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    if args.device == "cpu" and args.mode != "eager":
        ap.error(f"--mode {args.mode} needs CUDA: --device cpu runs --mode eager only")
    if args.mode == "compile" and not hasattr(torch, "compile"):
        ap.error(f"--mode compile needs torch.compile (PyTorch 2.0 or later; this is {torch.__version__})")
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    tf32 = args.precision == "tf32"
    bf16 = args.precision == "bf16"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    if args.device == "cuda":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
        sync = torch.cuda.synchronize
    else:
        dev = torch.device("cpu")

        def sync():
            pass
    torch.manual_seed(args.seed)
    xs, ys = load(args.data_dir, "train", dev)
    xt, yt = load(args.data_dir, "t10k", dev)
    xs, xt = xs.contiguous(memory_format=fmt), xt.contiguous(memory_format=fmt)
    model = Net().to(dev, memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    B = args.batch_size
    n = xs.shape[0]
    nb = n // B  # full batches only: a graph has one shape
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)

    def fwd_loss(x, y):
        # cache_enabled=False: the cast weights must not outlive a captured
        # graph's pool (PyTorch's CUDA graphs notes); each is used once anyway
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            return F.nll_loss(model(x), y)

    def step_eager(x, y):
        opt.zero_grad(set_to_none=True)
        loss = fwd_loss(x, y)
        loss.backward()
        opt.step()
        return loss

    if args.mode == "compile":
        how = "AOTAutograd's backward"
        if hasattr(torch._dynamo.config, "compiled_autograd"):
            torch._dynamo.config.compiled_autograd = True
            how = "compiled autograd"

        def whole_step(x, y):
            loss = fwd_loss(x, y)
            loss.backward()
            opt.step()
            return loss
        compiled = torch.compile(whole_step, mode=args.compile_mode)
        print(f"# compiled: forward, backward ({how}) and SGD's step, mode {args.compile_mode}", flush=True)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            return compiled(x, y)
    elif args.mode == "graph":
        sx = torch.empty(B, 1, 28, 28, device=dev).contiguous(memory_format=fmt)
        sy = torch.zeros(B, dtype=torch.int64, device=dev)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up on a side stream, as the PyTorch docs do
                sx.copy_(xs[:B])
                sy.copy_(ys[:B])
                step_eager(sx, sy)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            sloss = fwd_loss(sx, sy)
            sloss.backward()
            opt.step()

        def step(x, y):
            sx.copy_(x)
            sy.copy_(y)
            graph.replay()
            return sloss
    else:
        step = step_eager

    warm = 20 if args.mode == "compile" else 10
    steps, timed_images, timed = 0, 0, 0.0
    t0 = None
    done = False
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(n, device=dev, generator=gen)
        for b in range(nb):
            idx = perm[b * B:(b + 1) * B]
            step(xs[idx], ys[idx])
            steps += 1
            if steps == warm:
                sync()
                t0 = time.perf_counter()
                timed_images = 0
            elif steps > warm:
                timed_images += B
            if args.max_steps and steps >= args.max_steps:
                done = True
                break
        if done:
            break
    sync()
    if t0 is not None:
        timed = time.perf_counter() - t0
    if not args.max_steps:
        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            for i in range(0, xt.shape[0], 1000):
                correct += (model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
        print(f"test_accuracy {correct / xt.shape[0]:.4f}")
    print(f"images_per_sec {timed_images / timed if timed else 0.0:.1f}", flush=True)


if __name__ == "__main__":
    main()
