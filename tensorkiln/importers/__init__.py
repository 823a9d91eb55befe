"""Importers: ONNX models (onnx/, one file per operator family) and PyTorch programs (torch/)."""
