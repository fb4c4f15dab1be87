#!/usr/bin/python3
"""PyTorch's side of bench/cpu_vs_torch.sh: the same Net, data, optimizer,
batch size and thread count as cnn_train, timed the same way (the first 3
steps are warm-up and not timed).  Launched like cnn_train: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment (or nothing for one process).
Prints `images_per_sec X`, after whole epochs `test_accuracy Y`, and
`first_step_unix T`: when rank 0's first step ended, its gradients
all-reduced (bench/startup.sh)."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contrib", "pytorch"))
from train_ddp import Net, load  # noqa: E402  (one definition of the model)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adadelta"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(args.seed)
    train = load(args.data_dir, "train", 0)
    test = load(args.data_dir, "test", 0)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DDP(Net()) if world > 1 else Net()
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        sched = None
    else:
        opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    step, timed_images, timed, warm = 0, 0, 0.0, 3
    done = False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            F.nll_loss(model(x), y).backward()
            opt.step()
            step += 1
            t1 = time.perf_counter()
            if step == 1:
                first_step_unix = time.time()  # its gradients all-reduced (DDP, in backward)
            if step > warm:
                timed += t1 - t0
                timed_images += x.shape[0]
            t0 = t1
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        if sched:
            sched.step()
        if done:
            break
    rate = torch.tensor([timed_images / timed if timed else 0.0])
    if world > 1:
        dist.all_reduce(rate)
    if not args.max_steps:
        model.eval()
        correct = torch.zeros(2)
        ts = DistributedSampler(test, num_replicas=world, rank=rank, shuffle=False)
        with torch.no_grad():
            for x, y in DataLoader(test, batch_size=256, sampler=ts):
                correct[0] += (model(x).argmax(1) == y).sum()
                correct[1] += y.numel()
        if world > 1:
            dist.all_reduce(correct)
        if rank == 0:
            print(f"test_accuracy {correct[0] / correct[1]:.4f}")
    if rank == 0:
        print(f"images_per_sec {rate.item():.1f}", flush=True)
        if step:
            print(f"first_step_unix {first_step_unix:.6f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
