"""Whole models: a graph IR of their own, imported from ONNX, rewritten by passes, fused.

The graph is the model as data (nodes of ONNX operator types with their
attributes, values with dtypes and shapes); passes are functions from a graph
to a graph; fusion groups nodes into the kernels that :mod:`tuner.model`
builds as tasks.
"""

from .ir import Graph, GraphError, Node, Value

__all__ = ["Graph", "GraphError", "Node", "Value"]
