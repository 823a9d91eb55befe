"""The model zoo: compiled == eager, state_dict names, KV-cache decoding == full recomputation,
and (when PyTorch is installed) the same numbers as the same architecture in PyTorch."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import models

RNG = np.random.default_rng(0)
TINY_BERT = models.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=32)
TINY_GPT2 = models.GPT2Config(vocab_size=50, n_positions=32, n_embd=32, n_layer=2, n_head=4)


def _eval(model):
    tk.manual_seed(0)
    model = model()
    model.eval()
    return model


@pytest.mark.parametrize("build,make_input", [
    (lambda: models.ResNet18(num_classes=10), lambda: RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)),
    (lambda: models.MobileNetV2(num_classes=10), lambda: RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)),
    (lambda: models.BertModel(TINY_BERT), lambda: RNG.integers(0, 100, (2, 8))),
    (lambda: models.GPT2LMHeadModel(TINY_GPT2), lambda: RNG.integers(0, 50, (2, 8))),
    (lambda: models.MLP((48, 32, 10)), lambda: RNG.standard_normal((4, 48)).astype(np.float32)),
], ids=["resnet18", "mobilenetv2", "bert", "gpt2", "mlp"])
def test_compiled_matches_eager(build, make_input):
    model = _eval(build)
    x = make_input()
    with tk.no_grad():
        eager = model(tk.tensor(x)).numpy()
        jitted = tk.jit(model)
        compiled = jitted(x).numpy()
        report = jitted.report(x)
    assert report.backend == "c", report.fallback_reason  # the generated C ran, not the interpreter
    np.testing.assert_allclose(compiled, eager, rtol=1e-4, atol=1e-5)


def test_state_dict_names_follow_torchvision_and_hugging_face():
    resnet = models.ResNet18().state_dict()
    assert {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
            "layer4.1.bn2.bias", "fc.weight"} <= set(resnet)
    assert len([k for k in resnet if k.endswith("num_batches_tracked")]) in (0, 20)
    mobilenet = models.MobileNetV2().state_dict()
    assert {"features.0.0.weight", "features.1.conv.0.0.weight", "features.2.conv.1.0.weight",
            "features.18.1.running_var", "classifier.1.weight"} <= set(mobilenet)
    bert = models.BertModel(TINY_BERT).state_dict()
    assert {"embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight",
            "encoder.layer.1.output.LayerNorm.bias", "encoder.layer.0.intermediate.dense.weight"} <= set(bert)
    gpt2 = models.GPT2LMHeadModel(TINY_GPT2).state_dict()
    assert {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.bias",
            "transformer.ln_f.weight"} <= set(gpt2)
    assert gpt2["transformer.h.0.attn.c_attn.weight"].shape == (32, 96)  # Conv1D layout (in, out)


def test_state_dict_round_trip():
    a, b = _eval(lambda: models.ResNet18(num_classes=5)), models.ResNet18(num_classes=5)
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})
    b.eval()
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    with tk.no_grad():
        np.testing.assert_array_equal(a(tk.tensor(x)).numpy(), b(tk.tensor(x)).numpy())


def test_gpt2_kv_cache_decoding_equals_full_recomputation():
    model = _eval(lambda: models.GPT2LMHeadModel(TINY_GPT2))
    prompt = RNG.integers(0, 50, (2, 5))
    with tk.no_grad():
        cached = model.generate(prompt, 6, compiled=True)
        seq = prompt.copy()
        for _ in range(6):
            nxt = model(tk.tensor(seq))[:, -1].argmax(-1).numpy().reshape(-1, 1)
            seq = np.concatenate([seq, nxt], axis=1)
    np.testing.assert_array_equal(cached, seq)


def test_create_by_name():
    assert isinstance(models.create("mlp"), models.MLP)
    with pytest.raises(ValueError, match="unknown model"):
        models.create("alexnet")


def test_resnet18_matches_pytorch():
    torch = pytest.importorskip("torch")
    tnn = torch.nn

    class Block(tnn.Module):
        def __init__(self, cin, c, stride):
            super().__init__()
            self.conv1, self.bn1 = tnn.Conv2d(cin, c, 3, stride, 1, bias=False), tnn.BatchNorm2d(c)
            self.conv2, self.bn2 = tnn.Conv2d(c, c, 3, 1, 1, bias=False), tnn.BatchNorm2d(c)
            self.downsample = (tnn.Sequential(tnn.Conv2d(cin, c, 1, stride, bias=False), tnn.BatchNorm2d(c))
                               if stride != 1 or cin != c else None)

        def forward(self, x):
            out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(out + (x if self.downsample is None else self.downsample(x)))

    class TorchResNet18(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1, self.maxpool = tnn.Conv2d(3, 64, 7, 2, 3, bias=False), tnn.BatchNorm2d(64), tnn.MaxPool2d(3, 2, 1)
            c = 64
            for i, (w, s) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
                setattr(self, f"layer{i}", tnn.Sequential(Block(c, w, s), Block(w, w, 1)))
                c = w
            self.avgpool, self.fc = tnn.AdaptiveAvgPool2d(1), tnn.Linear(512, 10)

        def forward(self, x):
            x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(0)
    reference = TorchResNet18()
    for module in reference.modules():  # non-trivial batch-norm statistics
        if isinstance(module, tnn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    reference.eval()
    ours = models.ResNet18(num_classes=10)
    ours.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()
                          if not k.endswith("num_batches_tracked")}, strict=False)
    ours.eval()
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        want = reference(torch.from_numpy(x)).numpy()
    with tk.no_grad():
        got = tk.jit(ours)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gpt2_matches_pytorch_with_hugging_face_names():
    torch = pytest.importorskip("torch")
    from tensorkiln.tools import torch_reference as ref
    torch.manual_seed(0)
    reference = ref.GPT2(vocab=50, positions=32, embd=32, layers=2, heads=4).eval()
    ours = models.GPT2LMHeadModel(TINY_GPT2)
    ours.load_hf_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    ours.eval()
    ids = RNG.integers(0, 50, (2, 7))
    with torch.no_grad():
        want, presents = reference(torch.from_numpy(ids))
        step_want, _ = reference(torch.tensor([[3], [4]]), presents, 7)
    with tk.no_grad():
        np.testing.assert_allclose(tk.jit(ours)(ids).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
        _, caches = ours.prefill(tk.tensor(ids), 10)
        step_got, _ = ours.decode_step(tk.tensor(np.array([[3], [4]])), tk.tensor(np.int64(7)), caches)
    np.testing.assert_allclose(step_got.numpy(), step_want.numpy(), rtol=1e-4, atol=1e-4)
