"""The `tensorkiln` command and what it runs: the demo, benchmarks against peers, ONNX runs, the op table."""
