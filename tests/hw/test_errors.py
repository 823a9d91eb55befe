"""Bad input gets an error that names the file, line and field - or the layer."""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln.hw import (AccelConfigError, AccelLayerError, ArrayConfig, Layer,
                           SramTooSmallError, read_config, read_topology, simulate)

FIXTURES = Path(__file__).parent / "fixtures"
HEADER = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
          "Num Filter, Strides,\n")


def _config_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (FIXTURES / "configs" / "16x16_ws.cfg").read_text()
    assert old in text
    path = tmp_path / "arch.cfg"
    path.write_text(text.replace(old, new))
    return path


def _error(fn, *args) -> str:
    with pytest.raises(AccelConfigError) as info:
        fn(*args)
    return str(info.value)


def test_config_value_that_is_not_a_number(tmp_path):
    path = _config_with(tmp_path, "ArrayWidth:     16", "ArrayWidth:     sixteen")
    message = _error(read_config, path)
    assert f"{path}:6:" in message
    assert "'ArrayWidth'" in message and "'sixteen'" in message


def test_config_zero_sram(tmp_path):
    path = _config_with(tmp_path, "FilterSramSzkB:   64", "FilterSramSzkB:   0")
    message = _error(read_config, path)
    assert f"{path}:8:" in message and "'FilterSramSzkB'" in message and "positive" in message


def test_config_unknown_dataflow(tmp_path):
    path = _config_with(tmp_path, "Dataflow : ws", "Dataflow : rs")
    message = _error(read_config, path)
    assert "'Dataflow'" in message and "ws, os, is" in message and "'rs'" in message


def test_config_missing_required_key(tmp_path):
    path = _config_with(tmp_path, "ArrayHeight:    16\n", "")
    message = _error(read_config, path)
    assert str(path) in message and "'ArrayHeight'" in message and "missing" in message


def test_config_line_without_a_value(tmp_path):
    path = _config_with(tmp_path, "Dataflow : ws", "Dataflow ws")
    message = _error(read_config, path)
    assert f"{path}:14:" in message and "key: value" in message


def test_config_user_bandwidth_needs_numbers(tmp_path):
    path = _config_with(tmp_path, "InterfaceBandwidth: CALC", "InterfaceBandwidth: USER")
    path.write_text(path.read_text().replace("Bandwidth : 10", "Bandwidth : fast"))
    message = _error(read_config, path)
    assert "'Bandwidth'" in message and "'fast'" in message


def test_config_sparsity_is_refused(tmp_path):
    path = _config_with(tmp_path, "SparsitySupport : false", "SparsitySupport : true")
    assert "'SparsitySupport'" in _error(read_config, path)


def test_missing_file_is_named(tmp_path):
    assert "nope.cfg" in _error(read_config, tmp_path / "nope.cfg")
    assert "nope.csv" in _error(read_topology, tmp_path / "nope.csv")


@pytest.mark.parametrize("row,line_field,words", [
    ("Conv1, 10, 10, 3, 3, 4, 8, x,", "'Strides'", ["'x'", "Conv1"]),
    ("Conv1, 10, 10, 3, 3, 0, 8, 1,", "'Channels'", ["positive", "Conv1"]),
    ("Conv1, 10, 10, 3, 3, 4,", "'Num Filter'", ["6 fields"]),
    ("Conv1, 10, 10, 11, 3, 4, 8, 1,", "'Filter Height'", ["larger", "ifmap height 10"]),
    ("Conv1, 10, 2, 3, 3, 4, 8, 1,", "'Filter Width'", ["larger"]),
    ("Conv1, 10, 10, 3, 3, 4, 8, 1, 2:4,", "'Sparsity'", ["not modelled"]),
    ("Conv1, 10, 10, 3, 3, 4, 8, 1, banana,", "'Sparsity'", ["'banana'"]),
])
def test_bad_topology_rows(tmp_path, row, line_field, words):
    path = tmp_path / "net.csv"
    path.write_text(HEADER + "Ok, 8, 8, 3, 3, 2, 2, 1,\n\n" + row + "\n")
    message = _error(read_topology, path)
    assert f"{path}:4:" in message            # header, a good row, a blank line, then ours
    assert line_field in message
    for word in words:
        assert word in message


def test_bad_gemm_row(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("Layer Name, M, N, K,\nfc, 10, -3, 4,\n")
    message = _error(read_topology, path)
    assert f"{path}:2:" in message and "field 'N'" in message


def test_empty_topology(tmp_path):
    path = tmp_path / "e.csv"
    path.write_text(HEADER)
    assert "no layers" in _error(read_topology, path)


def test_a_layer_that_cannot_run_is_named():
    with pytest.raises(AccelLayerError, match="layer 'tiny': filter height 5 is larger"):
        Layer("tiny", 3, 3, 5, 5, 1, 1)
    with pytest.raises(AccelLayerError, match="layer 'empty': num_filters must be a positive"):
        Layer("empty", 3, 3, 1, 1, 1, 0)
    with pytest.raises(AccelLayerError, match="layer 'g': groups"):
        Layer.gemm("g", 3, 3, 3, groups=-1)


def test_sram_too_small_for_one_fold_is_reported():
    array = ArrayConfig(rows=64, cols=64, filter_sram_kb=2, dataflow="ws")
    with pytest.raises(SramTooSmallError) as info:
        simulate([Layer("big", 16, 16, 3, 3, 64, 64)], array=array)
    message = str(info.value)
    assert "layer 'big'" in message and "filter SRAM" in message and "4096" in message
    # output stationary keeps the outputs, not the weights, in the PEs:
    array_os = array.with_(dataflow="os", ofmap_sram_kb=0.5)
    assert "ofmap SRAM" in _error(simulate, [Layer("big", 16, 16, 3, 3, 64, 64)], array_os)


def test_bad_array_settings():
    assert "rows" in _error(ArrayConfig, 0, 4)
    assert "dataflow" in _error(lambda: ArrayConfig(dataflow="rs"))
    assert "shape" in _error(simulate, [Layer.gemm("g", 2, 2, 2)], "32by32")
