"""Model files: GGUF reading/writing (gguf_file) and the tokenizer built from GGUF metadata (tokenizer).

Submodules are imported directly (`from mtp_turbo.io.gguf_file import GGUFFile`) so that opening a
file does not pay for importing `sentencepiece`.
"""
