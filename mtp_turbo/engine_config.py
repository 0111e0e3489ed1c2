"""The engine's configuration, without torch (the command line builds its flags from it quickly).

Owns: EngineConfig and its legal values. Ignores: everything the engine does with it (engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None  # GGUF path; None = the default Gemma-3-270M
    device: str = "auto"  # auto | cpu | cuda
    ctx_size: int = 4096  # cells of the static KV cache (prompt + generated)
    prefill_chunk: int = 512  # rows per prefill forward (torch kernels; the fused ones take <= 128-row chunks)
    cuda_graphs: bool = True  # replay captured decode/verify steps on CUDA
    compile: bool = True  # torch.compile the captured steps (fuses elementwise work)
    kernels: str = "auto"  # few-row steps: triton (fused kernels), torch, auto (triton on CUDA)
    progress: bool = True  # progress bars on loading and long prefills
    # plain decoding: steps per device program (one host sync per program; a stop mid-program
    # discards the rest). 0 = auto: 4 where the steps replay from CUDA graphs, else 1
    decode_steps: int = 0
    # launch each device program (a round, a program of plain steps) before the previous one's
    # result is read, from what the device holds: auto = where programs replay from CUDA graphs
    pipeline: str = "auto"  # auto | on | off
    # matrices on the CPU: auto (int8, but where 4-bit file blocks hold most of the layers' weights
    # those matrices keep their 4-bit codes: half the bytes a step), int8 (per-row codes for all), f32 (the file's dequantized values:
    # the reference the tests compare with transformers); bf16 activations for auto and int8
    cpu_weights: str = "auto"
    # keep the CPU's int8 matrices in the user's cache ($XDG_CACHE_HOME/mtp-turbo/cpu-int8/, about the
    # model file's size): a later load maps them instead of quantizing again (~1 s of a 2-core start)
    cpu_cache: bool = True
    # CUDA with the fused kernels: the matrices held as the file's own bytes (on Hopper in integer
    # tensor-core layouts, quant/frag_matrix.py; elsewhere dequantized inside the GEMVs): about the file's
    # size instead of ~3.5x it, faster than dense at a 4B shape but slower at 1-1.5B and in prefill
    # (bench/RESULTS.md session 36). auto: only where the dense copy would not fit the free memory
    file_weights: str = "auto"  # auto | on | off (True / False are taken as on / off)
    # CPU threads of a step: 0 = auto (all the cores this process may use, or one when that is
    # faster: measured while decoding, so another busy process does not stall every step)
    threads: int = 0

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.ctx_size < 16:
            raise ConfigError(f"ctx-size must be >= 16, got {self.ctx_size}")
        if self.kernels not in ("auto", "triton", "torch"):
            raise ConfigError(f"kernels must be auto, triton or torch, got {self.kernels!r}")
        if not 0 <= self.decode_steps <= 8:
            raise ConfigError(f"decode-steps must be in 0..8 (0 = auto), got {self.decode_steps}")
        if self.pipeline not in ("auto", "on", "off"):
            raise ConfigError(f"pipeline must be auto, on or off, got {self.pipeline!r}")
        if self.threads < 0:
            raise ConfigError(f"threads must be >= 0 (0 = auto), got {self.threads}")
        if self.cpu_weights not in ("auto", "int8", "f32"):
            raise ConfigError(f"cpu-weights must be auto, int8 or f32, got {self.cpu_weights!r}")
        if isinstance(self.file_weights, bool):  # Python callers' switch
            object.__setattr__(self, "file_weights", "on" if self.file_weights else "off")
        if self.file_weights not in ("auto", "on", "off"):
            raise ConfigError(f"file-weights must be auto, on or off, got {self.file_weights!r}")
        if self.prefill_chunk < 1:
            raise ConfigError(f"prefill-chunk must be >= 1, got {self.prefill_chunk}")
