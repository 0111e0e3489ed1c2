"""What the round's host-side CUDA calls cost on the host (us a call, medians of 2000): a pinned
tensor's item write, a small non-blocking upload from pinned memory, a download + stream sync, and
a graph replay call of a tiny captured graph. Figures in bench/RESULTS.md session 18.

    python bench/experiments/host_op_cost.py
"""

import statistics
import time

import torch


def cost(f, n=2000):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main():
    dev = torch.device("cuda")
    n_host = torch.zeros(1, dtype=torch.int64, pin_memory=True)
    n_dev = torch.zeros(1, dtype=torch.int64, device=dev)
    big_host = torch.zeros(1100, dtype=torch.int64, pin_memory=True)
    big_dev = torch.zeros(1100, dtype=torch.int64, device=dev)
    out_host = torch.zeros(10, dtype=torch.int64, pin_memory=True)
    out_dev = torch.zeros(10, dtype=torch.int64, device=dev)
    x = torch.zeros(1024, device=dev)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(50):
            x.add_(1)
    torch.cuda.synchronize()
    arr = big_host.numpy()

    def item_write():
        n_host[0] = 5

    def numpy_write():
        arr[0] = 5

    def up1():
        n_dev.copy_(n_host, non_blocking=True)

    def up_big():
        big_dev.copy_(big_host, non_blocking=True)

    def down_sync():
        out_host.copy_(out_dev, non_blocking=True)
        torch.cuda.current_stream().synchronize()

    def tolist():
        out_host.tolist()

    def replay():
        g.replay()

    def inference_mode():
        with torch.inference_mode():
            pass

    for name, f in (("pinned item write", item_write), ("numpy view write", numpy_write), ("upload 1 int64", up1),
                    ("upload 1100 int64", up_big), ("download 10 + sync", down_sync), ("tolist of 10", tolist),
                    ("replay of a 50-kernel graph", replay), ("inference_mode enter+exit", inference_mode)):
        c = cost(f)
        torch.cuda.synchronize()
        print(f"{name:30s} {c:7.2f} us")


if __name__ == "__main__":
    main()
