"""A reference model as a static web package (`fxc web`) on the webgl, webgpu or wasm target, opened in the headless
browser from `fxc serve`: the page's latency and load time, its outputs' error against eager PyTorch, and a
screenshot of the page.

    .venv/bin/python -m benchmarks.web_package --target webgpu --model mobilenet_v2 --shot docs/img/webgpu_package.png
    .venv/bin/python -m benchmarks.web_package --target webgl --model mixed --shot docs/img/webgl_wasm_package.png
    .venv/bin/python -m benchmarks.web_package --target wasm --model mobilenet_v2 --shot docs/img/wasm_package.png

Models from fxc.testing.models (batch 1, BERT at sequence length 32, batch norms given non-trivial statistics by
make_model), `mixed`: tests/deploy/test_web_mixed.py's model of ops WebGL draws and ops it refuses (wasm kernels), or
`roberta`: the BERT encoder with RoBERTa's position ids counted over the mask (a cumsum and a gather by it: wasm).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

import fxc
from fxc.deploy.web import serve, write_package
from fxc.runtime.browser.page import open_browser


class RobertaPositions(torch.nn.Module):
    """The BERT encoder with RoBERTa's position ids, counted over the attention mask (an int64 cumsum, and the
    position embedding gathered by it: two groups WebGL refuses, which run as wasm kernels in the page)."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        b = self.bert
        pos = torch.cumsum(attention_mask, 1) * attention_mask + 1          # padding_idx 1, as RoBERTa's
        x = b.word_embeddings(input_ids) + b.position_embeddings(pos) + b.token_type_embeddings(
            b.token_type_ids[:, :input_ids.shape[1]])
        x = b.emb_norm(x)
        additive_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in b.layers:
            x = layer(x, additive_mask)
        return x


def model_and_inputs(name: str):
    if name == "roberta":
        from fxc.testing.models import example_inputs, make_model
        ids, mask = example_inputs("bert", batch=1, seq_len=32)
        mask = mask.clone()
        mask[:, 24:] = 0                                                     # a padded tail
        return RobertaPositions(make_model("bert")).eval(), (ids, mask)
    if name == "mixed":
        from tests.deploy.test_web_mixed import Mixed
        torch.manual_seed(0)
        return Mixed().eval(), (torch.randn(4, 8), torch.tensor([5, -3, 2, 6]))
    from fxc.testing.models import example_inputs, make_model
    return make_model(name), example_inputs(name, batch=1, seq_len=32)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="webgpu", choices=["webgl", "webgpu", "wasm", "wasm -num-threads=2"])
    p.add_argument("--model", default="mobilenet_v2")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--shot", help="write the page's screenshot (PNG) here")
    a = p.parse_args(argv)
    model, inputs = model_and_inputs(a.model)
    with torch.no_grad():
        expected = model(*inputs)
    expected = [t.numpy() for t in (expected if isinstance(expected, (tuple, list)) else (expected,))]
    work = Path(tempfile.mkdtemp(prefix="fxc-web-"))
    art = fxc.export(fxc.from_torch(model, inputs, target=a.target), work / f"{a.model}.fxc")
    index = write_package(art, work / "site", inputs=[t.numpy() for t in inputs], runs=a.runs)
    with serve(index.parent) as server:
        page = open_browser().visit(server.url, name="web-package")
        try:
            page.wait_for("document.body.dataset.state !== 'loading'", seconds=1800)
            state, status, result, outs = page.call(
                "() => [document.body.dataset.state, document.getElementById('status').textContent, "
                "document.getElementById('result').textContent, window.fxcOutputs || null]")
            if a.shot:
                page.screenshot(Path(a.shot))
        finally:
            page.close()
    if state != "done":
        raise SystemExit(f"the page failed: {status}")
    r = json.loads(result)
    errs = [float(np.abs(np.asarray(g, np.float64).reshape(e.shape) - e).max() / max(np.abs(e).max(), 1e-30))
            for g, e in zip(outs, expected)]
    row = {"model": a.model, "target": a.target, "renderer": r["renderer"], "latency_ms": round(r["latency_ms"], 1),
           "load_ms": round(r["load_ms"]), "max_err_over_scale": max(errs), "package_bytes":
           sum(f.stat().st_size for f in index.parent.iterdir())}
    print(json.dumps(row))
    return row


if __name__ == "__main__":
    main()
