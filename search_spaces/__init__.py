"""Operator templates: definition, NumPy reference, knob space and schedule per operator."""
