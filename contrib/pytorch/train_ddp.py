#!/usr/bin/python3
"""Data-parallel training of the PyTorch MNIST example CNN on Fashion-MNIST.

An ordinary env:// script: no torchrun, no hand-set variable. Under
`srun --ddp=gloo python3 train_ddp.py` every task already has MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK from slurm-ddp's plugin.

    srun -N2 --ntasks-per-node=1 --ddp=gloo python3 contrib/pytorch/train_ddp.py --epochs 1
"""
import argparse
import gzip
import hashlib
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    """The PyTorch examples MNIST network."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        sys.exit(f"{path}: bad IDX magic (expected unsigned-byte data)")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        sys.exit(f"{path}: truncated: {arr.size} bytes for dims {dims}")
    return arr.reshape(dims)


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530  # Fashion-MNIST mean/std
    return TensorDataset(x, torch.from_numpy(y.astype(np.int64)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=os.environ.get("DDP_DATA_DIR", "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: whole epochs)")
    ap.add_argument("--batch-size", type=int, default=64, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--train-limit", type=int, default=0, help="use only the first N training images")
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    backend = os.environ.get("DDP_BACKEND", "gloo")
    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"
    # NCCL: one GPU per rank. slurm-ddp lists every GPU of the node in
    # CUDA_VISIBLE_DEVICES with this task's own (the one near its CPUs) at
    # index LOCAL_RANK, so cuda:LOCAL_RANK is right and peer access stays.
    # Under --gpus-per-task Slurm shows each task only its own GPUs: cuda:0.
    device = torch.device("cpu")
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", 0 if torch.cuda.device_count() == 1 else local)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    if rank == 0:
        addr = os.environ["MASTER_ADDR"]
        addr = f"[{addr}]" if ":" in addr else addr  # IPv6: the port stays apart
        print(f"# world {world}, backend {backend}, device {device.type}, master {addr}:{os.environ['MASTER_PORT']}", flush=True)

    train = load(args.data_dir, "train", args.train_limit)
    test = load(args.data_dir, "test", args.test_limit)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step, images, t0 = 0, 0, time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            images += x.shape[0]
            if rank == 0 and step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
    elapsed = time.time() - t0

    model.eval()
    test_sampler = DistributedSampler(test, num_replicas=world, rank=rank, shuffle=False)
    correct = torch.zeros(2, device=device)
    with torch.no_grad():
        for x, y in DataLoader(test, batch_size=256, sampler=test_sampler):
            x, y = x.to(device), y.to(device)
            correct[0] += (model(x).argmax(1) == y).sum()
            correct[1] += y.numel()
    dist.all_reduce(correct)
    rate = torch.tensor([images / elapsed], device=device)
    dist.all_reduce(rate)

    digest = hashlib.sha256()
    for p in model.module.parameters():
        digest.update(p.detach().cpu().numpy().tobytes())
    print(f"params rank {rank} {digest.hexdigest()[:16]} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print(f"test_accuracy {correct[0] / correct[1]:.4f} images_per_sec {rate.item():.0f} world_size {world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
