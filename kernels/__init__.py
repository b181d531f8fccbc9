"""Fused Triton kernels for the AttnRes depth read, installed as ``dormouse_kernels``."""
