"""Forwards of T rows, eager or replayed from captured CUDA graphs.

Owns: the static-shape step kinds (decode 1 row, verify k+1 rows, ...) captured once per row count
on CUDA (optionally through torch.compile for fusion), with their static input/output buffers.
Ignores: what the rows mean (engine/spec decide), cache lengths (the caller commits/rolls back).

A captured step reads the cache through position vectors that live on the device: global layers
read every cell (masked by position), sliding layers gather the W-1+T cells ending at the last
row. So one graph serves every position, and rollback needs no re-capture.
"""

from __future__ import annotations

import sys
from typing import Iterator

import torch

from .decoder import Decoder


class StepRunner:
    def __init__(self, model: Decoder, kv, use_graphs: bool, compile: bool = False, max_rows: int = 8,
                 kernels: str = "torch"):
        assert kernels in ("torch", "triton"), kernels
        self.model, self.kv = model, kv
        self.use_graphs = use_graphs and model.device.type == "cuda"
        self.kernels = kernels
        self.fused = None
        if kernels == "triton":
            from .fused import MAX_ROWS, FusedDecoder

            self.fused = FusedDecoder(model, kv)
            max_rows = min(max_rows, MAX_ROWS)
            compile = False  # nothing left for the compiler to fuse
        self.compile = compile
        self.max_rows = max_rows
        self._graphs: dict[int, tuple] = {}  # rows -> graph; -rows: a prefill chunk's graph
        self._compiled = None
        self._prefill_rows = self.fused.rows if self.fused is not None and self.fused.rows > max_rows else 0
        self._arange = torch.arange(max(max_rows, self._prefill_rows), dtype=torch.int64, device=model.device)

    @property
    def prefill_rows(self) -> int:
        """Rows of a prefill chunk the fused kernels take at once (0: no such path, torch)."""
        return self._prefill_rows if self.fused is not None else 0

    def prefill_chunk(self, n: int) -> int:
        """Rows of the prefill chunk for n rows still to encode: the largest of prefill_rows,
        its halves, ... down to 16 that fits, or 0 (decode steps take the rest). A few fixed sizes:
        one CUDA graph each."""
        size = self.prefill_rows
        while size >= 16 and size > n:
            size //= 2
        return size if size >= 16 and size > self.max_rows else 0

    def prefill(self, tokens: torch.Tensor, pos0: int) -> torch.Tensor:
        """Prefill rows tokens [T] (T a prefill_chunk size) at positions [pos0, pos0 + T): their K/V written,
        hidden [T, D] returned (a static buffer with graphs); no LM head. The same kernels as a
        decode step over row blocks, so a row's K/V and hidden equal a decode step's, bit for bit."""
        T = int(tokens.shape[0])
        assert self.prefill_rows and T == self.prefill_chunk(T), (T, self.prefill_rows)
        with torch.inference_mode():
            g = (self._graphs.get(-T) or self._try_capture(T, prefill=True)) if self.use_graphs else None
            if g is None:
                if self.fused is None:  # the Triton step failed to build (said once): the torch forward
                    return self.model.forward(tokens, pos0, self.kv, logits=False)[1]
                pos = torch.arange(pos0, pos0 + T, dtype=torch.int64, device=tokens.device)
                return self.fused.forward(tokens, pos, head=False)[1]
            graph, tok_buf, pos_buf, out = g
            tok_buf.copy_(tokens)
            torch.add(self._arange[:T], pos0, out=pos_buf)
            graph.replay()
            return out[1]

    def encode(self, buf: torch.Tensor, start: int, end: int, chunk: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """Encode rows buf[start:end] at their positions without the LM head, committing each chunk's
        K/V to the cache: the fused kernels' prefill chunks, then decode steps of up to max_rows rows
        (their K/V bit-identical to one-row steps'), or the torch forward `chunk` rows at a time.
        Yields (c0, c1, hidden [c1 - c0, D]) a chunk (hidden: a buffer the next chunk overwrites)."""
        fused = self.fused is not None
        c0 = start
        with torch.inference_mode():
            while c0 < end:
                big = self.prefill_chunk(end - c0) if fused else 0
                if big:  # a chunk through the row-block kernels
                    c1 = c0 + big
                    hidden = self.prefill(buf[c0:c1], c0)
                elif fused:
                    c1 = min(end, c0 + self.max_rows)
                    _, hidden = self.forward(buf[c0:c1], c0)
                else:
                    c1 = min(end, c0 + chunk)
                    _, hidden = self.model.forward(buf[c0:c1], c0, self.kv, logits=False)
                self.kv.commit(c1)
                yield c0, c1, hidden
                c0 = c1

    def forward(self, tokens: torch.Tensor, pos0: int) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [T] on the model's device, rows at positions [pos0, pos0+T).
        Returns (logits [T, V] fp32, hidden [T, D]); with graphs these are static buffers valid
        until the next call with the same T."""
        T = int(tokens.shape[0])
        if T > self.max_rows:
            with torch.inference_mode():
                return self.model.forward(tokens, pos0, self.kv)
        with torch.inference_mode():  # the graphs' static buffers are inference tensors
            g = (self._graphs.get(T) or self._try_capture(T)) if self.use_graphs else None
            if g is None:
                if self.fused is not None:
                    pos = torch.arange(pos0, pos0 + T, dtype=torch.int64, device=tokens.device)
                    return self.fused.forward(tokens, pos)
                return self.model.forward(tokens, pos0, self.kv)
            graph, tok_buf, pos_buf, out = g
            tok_buf.copy_(tokens)  # device to device
            torch.add(self._arange[:T], pos0, out=pos_buf)  # a scalar kernel argument: no host copy
            graph.replay()
            return out

    def body(self, tokens: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's device work for tokens [T] at device positions pos [T] (consecutive), T <=
        max_rows: no host sync and nothing shaped by positions, so a caller's CUDA graph can
        capture it (call it once outside the capture first: kernels compile on first use). Off
        CUDA nothing is captured: the rows take forward()'s path (one position read on the host,
        free there), so eager work gives what forward() gives, bit for bit."""
        if self.model.device.type != "cuda":
            return self.forward(tokens, int(pos[0]))
        if self.fused is None and self.compile:
            if self._compiled is None:
                self._compiled = torch.compile(self._body, dynamic=False, fullgraph=True)
            return self._compiled(tokens, pos)
        return self._body(tokens, pos)

    # ---- capture ------------------------------------------------------------------------------
    def _body(self, tokens: torch.Tensor, pos: torch.Tensor):
        if self.fused is not None:
            return self.fused.forward(tokens, pos)
        m = self.model
        key_pos = {True: None}
        if m.cfg.has_sliding:  # sliding layers read the W-1+T cells ending at the last row
            W = m.cfg.sliding_window
            key_pos[False] = pos[0] + torch.arange(-(W - 1), pos.shape[0], device=pos.device)
        h = m.forward_hidden(tokens, pos, self.kv, key_pos)
        return m.lm_head(m.final_norm(h)), h

    def _try_capture(self, T: int, prefill: bool = False):
        """The graph for T rows, or None: eager steps from now on when capture fails, or a prefill
        chunk whose fused step failed to build."""
        try:
            return self._capture(T, prefill)
        except Exception as e:  # a failed capture costs speed, never the answer
            print(f"mtp-turbo: CUDA graph capture failed ({type(e).__name__}: {str(e)[:200]}); "
                  "running the step eagerly", file=sys.stderr)
            self.use_graphs = False
            return None

    def _capture(self, T: int, prefill: bool = False):
        dev = self.model.device
        tok_buf = torch.zeros(T, dtype=torch.int64, device=dev)
        # warm-up and capture write cells at and past the committed length: those are stale
        # anyway, and every later forward rewrites its cells before reading them
        p0 = min(self.kv.length, self.kv.capacity - T)
        assert p0 >= 0, "context smaller than the step"
        pos_buf = torch.arange(p0, p0 + T, dtype=torch.int64, device=dev)
        fn = self._body
        if prefill:
            fused = self.fused
            fn = lambda tokens, pos: fused.forward(tokens, pos, head=False)  # noqa: E731
        if self.fused is not None:
            try:
                self._warm(fn, tok_buf, pos_buf)
            except Exception as e:  # a Triton build failure costs speed, never the answer
                print(f"mtp-turbo: fused Triton step failed ({type(e).__name__}: {str(e)[:300]}); "
                      "using the torch step instead", file=sys.stderr)
                self.fused, self.kernels, self.max_rows = None, "torch", 8
        if prefill and self.fused is None:  # the Triton step just failed: prefill() takes the torch forward
            return None
        if self.compile and self.fused is None:
            try:
                # static shapes: one specialisation per row count (decode 1, verify k+1; the
                # round pads short drafts to k+1): 1.39 ms per 1-row step on an H200 against
                # 2.42 ms for one dynamic-shape graph (bench/RESULTS.md)
                if self._compiled is None:
                    self._compiled = torch.compile(self._body, dynamic=False, fullgraph=True)
                fn = self._compiled
                self._warm(fn, tok_buf, pos_buf)
            except Exception as e:  # a compiler failure costs speed, never the answer
                print(f"mtp-turbo: torch.compile failed ({type(e).__name__}: {str(e)[:200]}); "
                      "capturing the eager step instead", file=sys.stderr)
                fn = self._body
                self.compile = False
        self._warm(fn, tok_buf, pos_buf)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            out = fn(tok_buf, pos_buf)
        key = -T if prefill else T
        self._graphs[key] = (graph, tok_buf, pos_buf, out)
        return self._graphs[key]

    @staticmethod
    def _warm(fn, tok_buf, pos_buf) -> None:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.inference_mode():
            for _ in range(3):
                fn(tok_buf, pos_buf)
        torch.cuda.current_stream().wait_stream(s)
