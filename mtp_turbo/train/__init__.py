"""Training an MTP head for a model that has none (self-distillation): data (data.py), the batched
training forwards (forward.py), the loop (distill.py) and the head file writer (export.py); config.py holds `train-mtp`'s flags without torch."""
