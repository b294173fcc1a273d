"""Whole models: ONNX in, a module of tuned kernels out (``compile_model``)."""

from .module import ModelInputError, Module, compile_model

__all__ = ["ModelInputError", "Module", "compile_model"]
