"""The speculative round as one device program: drafts written into the target's token buffer,
the verify forward of k+1 rows, acceptance on the device, the emitted tokens written back, and
one host read at the end. k = 0 is a plain decoding step (forward 1 row, sample).

Owns: RoundProgram (the round's device work, replayed from one CUDA graph per (k, catch-up rows,
drafter kind) on CUDA, run eagerly elsewhere; `split` replays it as three graphs, draft / verify /
accept, with CUDA events between them, to time the parts), with verify.py's acceptance rules on
device tensors. Ignores: choosing k (adaptive.py), the loop and its stats (round.py), what the drafter
and the target compute (drafters/, the engine).

Device state between rounds: target.tok_buf[:n] holds the committed tokens (n = len(tokens)); the
round writes drafts d1..dk at [n, n+k), forwards rows tok_buf[n-1 : n+k] at positions n-1.., draws
t_i for the token at position n+i from row i (history tok_buf[:n+i] = committed ++ d1..di: the
penalty window the verifier needs, so sample_tokens serves plain decoding and verification alike),
and accepts d_{i+1} iff t_i == d_{i+1} (exact) or iff it equals row i's raw argmax (the legacy
lossy rule). The emitted tokens e_0..e_a (accepted drafts, then t_a) overwrite tok_buf[n, n+a];
out = [a, e_0, .., e_k] is the one thing the host reads. A drafter that reads hidden states gets
the verified rows' states stored on the device (all k+1 rows; the host marks a+1 of them valid).
Each program ends by advancing n_dev by what it committed, so the next one can be launched before
the host reads this one (launch_after): two out slots, each copied out after its own program.
The index work between the forward, the draws and the drafter (the rows' inputs, the drafts into
tok_buf, the acceptance and its writes, n_dev) is glue.py's few kernels on CUDA (torch ops
elsewhere): a round runs its drafter, one input kernel, the forward, the draws, one accept kernel.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ..errors import MtpTurboError
from ..models.greedy import GreedyPick
from ..sampling.config import SamplerConfig
from ..sampling.fused import PARAM_WORDS, sample_tokens, sampler_shape, sampler_values
from .drafters.mtp import GRAPH_ROWS
from .glue import RoundGlue
from .target import Target

MAX_K = 8  # drafts a round takes at most (the verify step's rows - 1)


def program_shape(sampler: SamplerConfig, vocab: int, history: int) -> tuple:
    """What a program's captured work depends on in `sampler` (the draws' kernels and their
    launches), not its values: the argmax, or the chain's sampler_shape. Programs are kept by it."""
    if sampler.greedy and not sampler.uses_penalties:
        return ("argmax",)
    return sampler_shape(sampler, vocab, history)


def launched_ahead(launch: Callable[[], Any], settle: Callable[[Any], list[int]], more: Callable[[], bool],
                   drain: Callable[[Any], object],
                   launch_after: Callable[[Any], Any] | None = None) -> Iterator[list[int]]:
    """Yield the tokens of device programs run ahead of the consumer: launch() starts one (-> a
    ticket), settle(ticket) waits for it, commits it and returns its tokens, more() says whether
    another is wanted. From the second program on, the next is launched before this one's tokens
    are handed on, so the consumer's work (stop checks, detokenizing, printing, a server's writes)
    runs while the device works; the first one's tokens go out first (a graph capture the next
    launch needs must not hold back the first token). launch_after(ticket), where given, starts
    the next program before `ticket`'s is read, from what the device holds (-> a ticket, or None
    when it cannot: then the next waits for this one's result), so the device never waits for the
    host between two programs. A program in flight when the consumer stops is drain(ticket)-ed:
    waited for, never committed."""
    queue = [launch()] if more() else []
    first = True
    try:
        while queue:
            if not first and launch_after is not None and len(queue) == 1:
                nxt = launch_after(queue[0])
                if nxt is not None:
                    queue.append(nxt)
            out = settle(queue.pop(0))
            if not queue and not first and more():
                queue.append(launch())
            first = False
            yield out
            if not queue and more():
                queue.append(launch())
    finally:
        for t in queue:
            drain(t)


@dataclass(frozen=True)
class Ticket:
    """A launched device program: a round of k drafts (kind "round") or `k` plain steps ("steps"),
    its output in out slot `slot`; fresh: the first run of its shape (it compiled and captured: no
    timing of its kind)."""

    kind: str
    k: int
    slot: int
    fresh: bool
    drafted: bool = False  # a round whose drafts the device drafter made

    @property
    def most(self) -> int:
        """Tokens it emits at most."""
        return self.k + (self.kind == "round")


class RoundProgram:
    """One target + sampler (+ drafter). run(k, host_drafts) -> (accepted, emitted tokens)."""

    def __init__(self, target: Target, sampler: SamplerConfig, mode: str = "exact", drafter=None,
                 graphs: bool = True, split: bool = False, pipeline: bool = False, glue: str = "auto",
                 vocab: int | None = None):
        """pipeline: the loops may launch a program before the previous one is read (launch_after);
        glue: RoundGlue's backend for the index work ("auto": its kernels on CUDA); vocab: the
        logits' width, where given every token read is checked against it (non-finite logits
        draw no token: an error, never an id outside the vocabulary)."""
        assert mode in ("exact", "greedy"), mode
        assert drafter is None or drafter.on_device or not drafter.reads_hidden, \
            "a drafter that reads hidden states drafts on the device (it gets them stored there)"
        self.target, self.mode, self.drafter, self.vocab = target, mode, drafter, vocab
        dev = target.device
        # the sampler's values as the draw kernels read them (set_sampler rewrites them for a call):
        # graphs captured once serve every seed, temperature, top-p... of this program's shape
        self.params = torch.zeros(PARAM_WORDS, dtype=torch.int64, device=dev)
        self._values: list[int] | None = None
        self.set_sampler(sampler)
        self.cuda = dev.type == "cuda"
        self.graphs, self.split = graphs and self.cuda, split and self.cuda
        pin = self.cuda
        self.n_host = torch.zeros(1, dtype=torch.int64, pin_memory=pin)
        self.n_dev = torch.zeros(1, dtype=torch.int64, device=dev)
        self.drafts_host = torch.zeros(MAX_K, dtype=torch.int64, pin_memory=pin)
        self.drafts_dev = torch.zeros(MAX_K, dtype=torch.int64, device=dev)
        self.out_dev = torch.zeros(MAX_K + 2, dtype=torch.int64, device=dev)
        # two output slots, each copied out right after its program (two programs may be in flight)
        self.out_host = torch.zeros(2, MAX_K + 2, dtype=torch.int64, pin_memory=pin)
        self.out_ready = [torch.cuda.Event() for _ in range(2)] if self.cuda else None
        self.slot = 0
        self.pipeline = pipeline and not self.split
        self._last: Ticket | None = None  # the last program launched
        # numpy views of the pinned buffers: item writes and reads between two rounds (GPU idle
        # time) without torch indexing (2.5 us a pinned item write on an H200 host, 0.1 through numpy)
        self.n_np, self.out_np = self.n_host.numpy(), self.out_host.numpy()
        self.ar = torch.arange(MAX_K + 1, dtype=torch.int64, device=dev)
        # the forward's input rows (rows n-1+j, their tokens) and the draw positions n+j of the
        # program running (glue.round_inputs / step_commit write them; every part reads them)
        self.rows, self.toks, self.pos = (torch.zeros(MAX_K + 1, dtype=torch.int64, device=dev) for _ in range(3))
        self.glue = RoundGlue(glue)
        self._graphs: dict[tuple, list] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.graphs else None
        self.last_split: tuple[float, float, float] | None = None  # ms draft / verify / accept (split)
        self.sample_backend = "auto"  # sample_tokens' ("torch" after a failure of the fused kernels)
        self.chooser = None  # the round loop's adaptive.KChooser, kept with the program across calls
        self.chooser_key = None
        self.last_fresh = False  # the last round's time is no timing of its k (see run)
        self.captures = 0  # CUDA graphs captured so far: a first use of a program's shape pays one
        self.pick = GreedyPick()  # the temp-0 token of each row without penalties (its scratch kept here)
        self._ran: set[tuple] = set()

    def set_sampler(self, sampler: SamplerConfig) -> None:
        """The sampler of the calls that follow: one of this program's shape (program_shape), its
        values written where the draws read them. Nothing may be in flight."""
        self.sampler = sampler
        values = sampler_values(sampler)
        if values != self._values:  # stream-ordered: every later launch reads them
            self.params.copy_(torch.tensor(values, dtype=torch.int64))
            self._values = values

    def release(self) -> None:
        """Drop the captured graphs (their memory goes back to the allocator's cache)."""
        self._graphs.clear()
        self._ran.clear()

    # ---- the device work -------------------------------------------------------------------------
    def _draw(self, logits: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The token at each position pos [T] from its row of logits [T, V] (history tok_buf):
        the argmax at temp 0 without penalties, else the sampler chain; plain steps and
        verification alike."""
        s = self.sampler
        if not self.cuda and self.vocab is not None and not bool(torch.stack(torch.aminmax(logits)).isfinite().all()):
            # (the CPU's argmax would pick a NaN's id; a GPU's ids are checked on read). The row's min
            # and max are finite iff every logit is (NaN propagates): one pass, ~8x cheaper on the CPU
            self._no_token()
        if s.greedy and not s.uses_penalties:
            return self.pick(logits)
        return sample_tokens(logits, self.target.tok_buf, pos, s, backend=self.sample_backend, params=self.params)

    def _parts(self, k: int, n_catch: int, staged, from_host: bool, n_int: int | None, after: int | None = None):
        """The three parts as closures over device state. n_int: the host's n for the eager
        forward (None when captured: everything then derives from n_dev). after: the k of the
        round before, for a round staged by the drafter's prepare_after (its drafts start from
        that round's outcome, read on the device: out_dev[0])."""
        tg, tb, n, T = self.target, self.target.tok_buf, self.n_dev, k + 1

        def draft():  # the drafts into tok_buf, and every part's inputs (a k = 0 round's too)
            d = None
            if k:
                if after is not None:
                    d = self.drafter.device_drafts_after(staged, after, k, self.out_dev[:1], tb, n)
                else:
                    d = self.drafts_dev[:k] if from_host else self.drafter.device_drafts(staged, n_catch, k, tb, n)
            self.glue.round_inputs(tb, n, d, k, self.ar, self.rows, self.toks, self.pos)

        def verify():
            if n_int is not None:
                return tg.forward(T)
            return tg.forward_body(self.toks[:T], self.rows[:T])

        def accept(logits, hidden):
            t = self._draw(logits, self.pos[:T])
            raw = logits.argmax(-1) if self.mode == "greedy" else None
            hid = None
            if self.drafter is not None and self.drafter.reads_hidden:
                hb = self.drafter.hidden_rows_buffer()
                if hb is None or hb.dtype != hidden.dtype or not hidden.is_contiguous():
                    self.drafter.store_hidden_rows(self.rows[:T], hidden)
                else:  # copied by the accept kernel
                    hid = (hidden, hb, self.rows[:T])
            # a, the emitted tokens into tok_buf and out_dev, and n_dev advanced by what it
            # committed (for a program launched before this one is read)
            self.glue.accept(tb, n, t, raw, k, self.ar, self.toks, self.pos, self.out_dev, hid)

        return draft, verify, accept

    def _plain_steps(self, steps: int):
        """`steps` plain steps as device work, for the three-part interface (draft / verify unused):
        step j forwards tok_buf[n-1+j] at position n-1+j and writes the token it draws at n+j, where
        the next step reads it (its penalty window too). Each step is the 1-row step's kernels and
        the sampler a 1-row round uses, so the tokens are the 1-step rounds' bit for bit; out =
        [steps - 1, t_0, .., t_{steps-1}] (the rows past the pending one whose K/V were written).
        With a drafter that reads the main model's states, each step stores its row's (as a k = 0
        round does), so rounds that draft again find every row they catch up on."""
        tg, tb, n = self.target, self.target.tok_buf, self.n_dev
        keep = self.drafter is not None and self.drafter.reads_hidden

        def run(*_):
            self.glue.round_inputs(tb, n, None, 0, self.ar, self.rows, self.toks, self.pos)
            for j in range(steps):  # step j: input row n-1+j, the token drawn at n+j
                logits, hidden = tg.forward_body(self.toks[:1], self.rows[:1])
                t = self._draw(logits, self.pos[:1])
                if keep:
                    self.drafter.store_hidden_rows(self.rows[:1], hidden)
                self.glue.step_commit(tb, n, t, j, steps, self.out_dev, self.toks, self.rows, self.pos)

        return (lambda: None), (lambda: ()), run

    def _whole(self, parts):
        draft, verify, accept = parts
        draft()
        accept(*verify())

    def _capture(self, key, parts):
        """CUDA graphs of the parts (one, or three with split). Warm-up runs on a side stream do
        this round's work early (the same writes), compiling the kernels; None on failure."""
        draft, verify, accept = parts
        keep = (self.n_dev.clone(), self.out_dev.clone())
        try:
            # the program advances n_dev and rewrites out_dev, which a program of a round staged
            # ahead reads: every warm-up starts from the same values, and so does the replay
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s), torch.inference_mode():
                for _ in range(2):
                    self.n_dev.copy_(keep[0])
                    self.out_dev.copy_(keep[1])
                    self._whole(parts)
            torch.cuda.current_stream().wait_stream(s)
            self.n_dev.copy_(keep[0])
            self.out_dev.copy_(keep[1])
            graphs = []
            with torch.inference_mode():
                if not self.split:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=self._pool):
                        self._whole(parts)
                    graphs = [g]
                else:
                    gd, gv, ga = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
                    with torch.cuda.graph(gd, pool=self._pool):
                        draft()
                    with torch.cuda.graph(gv, pool=self._pool):
                        out = verify()
                    with torch.cuda.graph(ga, pool=self._pool):
                        accept(*out)
                    graphs = [gd, gv, ga, out]  # out: keep the forward's outputs alive
        except Exception as e:  # a failure costs speed, never the answer: degrade, then try again
            torch.cuda.synchronize()
            self.n_dev.copy_(keep[0])
            self.out_dev.copy_(keep[1])
            what = self._degrade()
            print(f"mtp-turbo: the round's CUDA graph failed ({type(e).__name__}: {str(e)[:300]}); {what}",
                  file=sys.stderr)
            return self._capture(key, parts) if self.graphs else None
        self._graphs[key] = graphs
        self.captures += 1
        return graphs

    def _degrade(self) -> str:
        """One step down after a failure: the index glue's torch ops (the round's and the
        drafter's: the newest kernels), the torch sampler chain (or argmax), then the drafter's
        torch step, then no graphs (eager rounds). Says what it did."""
        changed = self.glue.backend != "torch"
        self.glue.backend = "torch"
        if self.drafter is not None:
            changed = self.drafter.glue_to_torch() or changed
        if changed:
            return "doing the round's index work with torch ops instead of its kernels"
        if self.sampler.greedy and not self.sampler.uses_penalties:
            if self.pick.backend != "torch":
                self.pick = GreedyPick("torch")
                return "taking the argmax with torch instead of the fused kernel"
        elif self.sample_backend != "torch":
            self.sample_backend = "torch"
            return "sampling with the torch chain instead of the fused kernels"
        if self.drafter is not None and self.drafter.on_device and self.drafter.fall_back_to_torch():
            return "drafting with torch ops instead of the fused kernels"
        self.graphs = False
        self._graphs.clear()
        return "running rounds eagerly"

    def _replay(self, graphs) -> None:
        if len(graphs) == 1:
            graphs[0].replay()
            return
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        ev[0].record()
        for i, g in enumerate(graphs[:3]):
            g.replay()
            ev[i + 1].record()
        self._events = ev

    # ---- one round ----------------------------------------------------------------------------
    def run(self, k: int, host_drafts: list[int] | None = None, steps: int = 1) -> tuple[int, list[int], int]:
        """One round with k drafts: host_drafts (a host drafter's, len k), or the device drafter's
        chain (host_drafts None, k > 0), or none (k = 0: a plain step; `steps` > 1: that many plain
        steps in one device program, one host sync for all). Returns (accepted, emitted tokens, k
        actually drafted); `steps` plain steps return (steps - 1, their tokens, 0), committed with
        accepted = steps - 1 (their first steps - 1 tokens' K/V are written). Commits nothing: the
        caller commits `emitted`. = finish(launch(...))."""
        return self.finish(self.launch(k, host_drafts, steps))

    @torch.inference_mode()
    def launch(self, k: int, host_drafts: list[int] | None = None, steps: int = 1) -> Ticket:
        """run()'s host half and the device program's launch, without waiting for it: the caller
        may do other host work (stream the previous round's text) while the device runs, then
        finish(ticket). Nothing else may be in flight; nothing may touch the target or the drafter
        before finish but launch_after."""
        tg = self.target
        n = len(tg.tokens)
        staged, n_catch, from_host = None, 0, host_drafts is not None
        assert 1 <= steps <= MAX_K and (steps == 1 or (k == 0 and not from_host)), (steps, k)
        if steps > 1:
            assert n + steps <= tg.ctx_size, (n, steps, tg.ctx_size)
            return self._go(n, "steps", steps, ("steps", steps), lambda n_int: self._plain_steps(steps))
        if from_host:
            k = len(host_drafts)
            self.drafts_host[:k] = torch.tensor(host_drafts, dtype=torch.int64)
            self.drafts_dev[:k].copy_(self.drafts_host[:k], non_blocking=True)
        elif k:
            prep = self.drafter.prepare(tg.tokens, k)
            if prep is None:
                k = 0
            else:
                n_catch, staged = prep
        assert 0 <= k <= MAX_K and n + k <= tg.ctx_size, (n, k, tg.ctx_size)
        # a catch-up longer than the drafter stages in its persistent buffer comes in a fresh
        # tensor a graph cannot replay with: that round runs eagerly (the MTP drafter encodes
        # such rows ahead of the round instead); either is no timing of k (after plain rounds: a
        # cost of switching k, not of drafting k)
        caught = n_catch > GRAPH_ROWS or (self.drafter is not None and self.drafter.caught_up > 0)
        return self._go(n, "round", k, (k, n_catch, from_host),
                        lambda n_int: self._parts(k, n_catch, staged, from_host, n_int),
                        graphable=n_catch <= GRAPH_ROWS, fresh=caught, drafted=bool(k) and not from_host)

    @torch.inference_mode()
    def launch_after(self, prev: Ticket, k: int, steps: int = 1) -> Ticket | None:
        """Launch the next program before `prev` (the last one launched, not yet finished) is
        read: k device drafts (the drafter's prepare_after: the MTP drafter stages every outcome of
        prev, the n-gram drafter needs nothing), or k = 0 and `steps` plain steps. Everything it
        reads of prev's outcome it reads on the device (n_dev, which each program advances,
        tok_buf, out_dev[0]). None where it cannot: the caller then finishes prev first and
        launches as usual."""
        tg = self.target
        assert self.pipeline and prev is self._last, "launch_after follows the last program launched"
        n = len(tg.tokens)  # prev's start: everything launched before it is committed
        if k == 0:
            if n + prev.most + steps > tg.ctx_size:
                return None
            if steps > 1:
                return self._go(None, "steps", steps, ("steps", steps), lambda n_int: self._plain_steps(steps))
            return self._go(None, "round", 0, (0, 0, False), lambda n_int: self._parts(0, 0, None, False, None))
        if not (prev.kind == "round" and prev.drafted and steps == 1) or n + prev.most + k > tg.ctx_size:
            return None
        staged = self.drafter.prepare_after(n, prev.k, k)
        if staged is None:
            return None
        return self._go(None, "round", k, ("after", prev.k, k),
                        lambda n_int: self._parts(k, 0, staged, False, None, after=prev.k), drafted=True)

    def finish(self, ticket: Ticket) -> tuple[int, list[int], int]:
        """Wait for the launched program (the round's one host sync) and read what it emitted:
        (accepted, emitted tokens, k), as run()."""
        self.last_split = None  # set below for a round replayed with its part events, else none
        self.last_fresh = ticket.fresh
        if ticket.kind == "steps":
            out = self._read(ticket.slot, ticket.k + 1)
            return out[0], out[1:], 0
        out = self._read(ticket.slot, ticket.k + 2)
        if self.split and self.graphs and getattr(self, "_events", None):
            e = self._events
            self.last_split = tuple(e[i].elapsed_time(e[i + 1]) for i in range(3))
            self._events = None
        a = out[0]
        return a, out[1: a + 2], ticket.k

    def _go(self, n: int | None, kind: str, k: int, key: tuple, parts, graphable: bool = True,
            fresh: bool = False, drafted: bool = False) -> Ticket:
        """Start a program's device work at n committed tokens (None: at the n_dev the program
        before it leaves): replay key's graph (captured from parts(None) the first time), or run
        parts(n) eagerly (no graphs, or not graphable). Its output goes to the next out slot."""
        if n is not None:
            self.n_np[0] = n
            self.n_dev.copy_(self.n_host, non_blocking=True)
        fresh = fresh or key not in self._ran
        self._ran.add(key)
        graphs = None
        if self.graphs and graphable:
            graphs = self._graphs.get(key)
            if graphs is None:
                graphs = self._capture(key, parts(None))
            if graphs is not None:
                self._replay(graphs)
        if graphs is None:
            self._whole(parts(n))
        if kind == "steps":
            self._events = None  # a split program's part timings are a round's, not these steps'
        slot, self.slot = self.slot, self.slot ^ 1
        if self.cuda:  # MAX_K + 2 words: all of them, read after this slot's event
            self.out_host[slot].copy_(self.out_dev, non_blocking=True)
            self.out_ready[slot].record()
        else:
            self.out_host[slot].copy_(self.out_dev)
        self._last = Ticket(kind, k, slot, fresh, drafted)
        return self._last

    def _read(self, slot: int, n: int) -> list[int]:
        """out slot `slot`'s first n words on the host: the program's one sync."""
        if self.cuda:
            self.out_ready[slot].synchronize()
        out = self.out_np[slot, :n].tolist()
        if self.vocab is not None and not all(0 <= t < self.vocab for t in out[1: out[0] + 2]):
            self._no_token()
        return out

    def _no_token(self):
        raise MtpTurboError(f"no token could be drawn after position {len(self.target.tokens)}: the model's "
                            "logits are not finite (NaN or infinite; a damaged model file?)")
