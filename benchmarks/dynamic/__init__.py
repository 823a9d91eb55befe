"""What the dynamic-shape benchmarks (dynamic_bert.py, dynamic_gpt2.py, dynamic_lstm.py, onnx_lstm_scan.py)
share: ONNX Runtime as their peer, the ONNX LSTM and its unrolled contender, BERT-base as one ONNX file,
GPT-2 generation."""
