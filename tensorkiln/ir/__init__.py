"""The graph IR: nodes and graphs (graph.py), the op table (ops/), fingerprints and rewriting helpers."""
