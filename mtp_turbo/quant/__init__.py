"""Low-bit weights: GGUF block formats and their quantizers (formats.py, lloyd.py), dequantization of
the GGUF types the engine loads (dequant.py), the packed layout (repack.py), the GEMV and
`PackedLinear` with the default tile per matrix (gemv.py), the kernels those defaults reach
(kernels/), and the `quant-report` command (report.py). Knows nothing of models."""
