"""Speculative decoding configuration (frozen; CLI flags map 1:1 to fields)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ConfigError

DRAFTERS = ("auto", "none", "ngram", "mtp", "model")
# draft_tokens = 0: the k of the fastest MTP rounds on MT-Bench at temperature 0 and at 0.6 with
# the sampled chain (H200, rounds launched ahead; bench/RESULTS.md 2026-12-02 session 19)
AUTO_K = {"greedy": 3, "sampled": 2}
# on the CPU (int8 matrices, 2 cores): k = 2 with adaptive k, by MT-Bench and HumanEval beside plain
# (bench/RESULTS.md session 25): a verify row costs more there than on a GPU
AUTO_K_CPU = 2
# a draft model (--draft model): k = 2 at temp 0 and 0.6, on an H200 and on 2 CPU cores (Qwen2.5-Coder
# 0.5B drafting for 1.5B, HumanEval: 1.33x / 1.29x plain on the GPU, 1.21x / 1.23x on the CPU; a draft
# step costs about half a target step there, so longer chains lose: bench/RESULTS.md session 29)
AUTO_K_MODEL = 2
SPEC_SAMPLE = ("exact", "greedy")


@dataclass(frozen=True)
class SpecConfig:
    # auto: the MTP head when one is there for the model (on the CPU with adaptive k), else the
    # registry's draft model for it when installed (io/registry.py), else plain (MTP: 1.85x plain
    # greedy, 1.11x at temp 0.6 on an H200, bench/RESULTS.md session 15; 1.29x / 1.19x on 2 CPU cores, session 25)
    draft: str = "auto"  # auto | none | ngram | mtp | model
    # k: drafts per round at most (verify forwards k+1 rows); 0 = auto: AUTO_K by temperature
    draft_tokens: int = 0
    # choose each round's k in 0..draft_tokens from measured acceptance and round times; off by
    # default: fixed k = 3 was faster on MT-Bench at temp 0 and 0.6 (bench/RESULTS.md 2026-12-01)
    adaptive: bool = False
    round_split: bool = False  # time the round's draft / verify / accept apart (three CUDA graphs, events between)
    spec_sample: str = "exact"  # exact (lossless) | greedy (legacy, lossy: for comparison only)
    ngram_max: int = 4  # longest suffix the n-gram drafter matches
    # shortest suffix it accepts as a match (below it: the last token repeated). 1: every round
    # drafts k on the device and a draft costs nothing extra, so what followed the last token's
    # previous occurrence is worth proposing (spec/drafters/ngram.py)
    ngram_min: int = 1
    draft_sink: int = 64  # MTP drafter: first cells always attended (0 = off, max 1024)
    draft_window: int = 256  # MTP drafter: last cells attended
    drafter: str | None = None  # MTP head file (None = the one shipped for the model)
    # --draft model: a smaller model of the same tokenizer (a GGUF path or a registry name) drafts
    draft_model: str | None = None
    # MTP drafter weight format: bf16 | q8_0 | q5_0 | q4_0. bf16: the file's Q8_0 values as dense
    # matrices on the main layers' kernels, 50.0 us a draft step against q8_0's packed GEMVs' 56.9
    # on an H200, same values hence same drafts (bench/RESULTS.md session 21)
    draft_quant: str = "bf16"
    draft_penalties: bool = True  # MTP drafter drafts the argmax after the sampler's penalties
    # MTP drafter at temp > 0: draft the verifier's own draw from the head's distribution. Off by
    # default: +0.03 tokens/round on CPU (within noise, RESULTS.md), its GPU cost not yet measured
    draft_coupling: bool = False
    draft_tile: str = ""  # GEMV tile override "KERNEL,BN,BK,W,S[,SPLIT_K]" for A/B ("" = per-matrix defaults)
    draft_head_quant: str = "main"  # drafter LM-head rows: main (the model's own bytes) | bf16 | q8_0 | q5_0 | q4_0
    # a draft tree instead of a chain (spec/tree.SpineTree: "DEPTH:M1,M2,..", "" = the chain of draft_tokens)
    draft_tree: str = ""

    def __post_init__(self) -> None:
        if self.draft not in DRAFTERS:
            raise ConfigError(f"draft must be one of {', '.join(DRAFTERS)}, got {self.draft!r}")
        if self.spec_sample not in SPEC_SAMPLE:
            raise ConfigError(f"spec-sample must be one of {', '.join(SPEC_SAMPLE)}, got {self.spec_sample!r}")
        if not (0 <= self.draft_tokens <= 7):
            raise ConfigError(f"draft-tokens must be in [1, 7] (0 = auto), got {self.draft_tokens}")
        if not (1 <= self.ngram_min <= self.ngram_max <= 16):
            raise ConfigError(f"need 1 <= ngram-min <= ngram-max <= 16, got {self.ngram_min}, {self.ngram_max}")
        if not (0 <= self.draft_sink <= 1024):
            raise ConfigError(f"draft-sink must be in [0, 1024], got {self.draft_sink}")
        if self.draft_window < 1:
            raise ConfigError(f"draft-window must be >= 1, got {self.draft_window}")
        if self.draft == "model" and not self.draft_model:
            raise ConfigError("draft model needs --draft-model PATH or NAME (a smaller model of the same tokenizer)")
        if self.draft_quant not in ("q8_0", "q5_0", "q4_0", "bf16"):
            raise ConfigError(f"draft-quant must be one of q8_0, q5_0, q4_0, bf16, got {self.draft_quant!r}")
        if self.draft_tile:
            from ..quant.gemv import parse_tile

            parse_tile(self.draft_tile)  # ConfigError naming the supported tiles
        if self.draft_head_quant not in ("main", "bf16", "q8_0", "q5_0", "q4_0"):
            raise ConfigError(f"draft-head-quant must be one of main, bf16, q8_0, q5_0, q4_0, got {self.draft_head_quant!r}")
        if self.draft_tree:
            try:
                self.tree
            except ValueError as e:
                raise ConfigError(f"draft-tree: {e}") from None
            if self.draft not in ("mtp", "auto") or self.spec_sample != "exact":
                raise ConfigError("draft-tree needs the MTP drafter (--draft mtp) and --spec-sample exact")

    @property
    def tree(self):
        """draft_tree as a spec.tree.SpineTree (None: chains)."""
        if not self.draft_tree:
            return None
        from .tree_shape import SpineTree

        return SpineTree.parse(self.draft_tree)

    def for_sampler(self, greedy: bool, cpu: bool = False) -> "SpecConfig":
        """This config with draft_tokens = 0 (auto) made the k for a temperature-0 (greedy) or a
        sampled run, on a GPU or the CPU."""
        if self.draft_tokens:
            return self
        if self.draft == "model":
            return dataclasses.replace(self, draft_tokens=AUTO_K_MODEL)
        return dataclasses.replace(self, draft_tokens=AUTO_K_CPU if cpu else AUTO_K["greedy" if greedy else "sampled"])
