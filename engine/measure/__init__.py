"""Measurements: the benchmark and its report, references (transformers' generate(), llama-cpp-python's Llama),
comparisons, divergence evidence, the fastest-setting sweep, the verify-cost curve and prompt sets."""
