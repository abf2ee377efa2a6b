"""SwiftShader's costs for one matmul draw, shaders written by hand (GLSL ES 3.00), in the headless Chromium page.

    .venv/bin/python -m benchmarks.webgl_matmul_micro                  # 128x1024 @ 1024x256 (BERT's FFN down)
    .venv/bin/python -m benchmarks.webgl_matmul_micro --m 128 --k 256 --n 1024 --reps 5

Every variant computes C = A @ B (float32, RGBA32F textures, flat: four consecutive elements a texel, `--width`
texels a row) and is checked against numpy. Variants (fetches per multiply-add in the inner loop):
- `present`: fxc's form before MRT: a fragment writes four outputs of a row; B read as B^T [N, K] (one texel of four
  k per output): 5 fetches / 16.
- `vec4`: B read as [K, N] (a texel is four outputs' weights at one k), the update a vec4 multiply-add: 5 / 16.
- `mrtR`: R render targets (R = 2, 4: one fragment writes R texels, rows m + r*M/R), B as [K, N]: (R + 4) / 16R;
  the R partial textures are copied into the output texture (copyTexSubImage2D) after the draw ("+copy").
- `mrt4t`: mrt4 with B read as B^T (a linear layer's weight as it is).
- `unroll8`: the k loop 8 a step; `packed2x2`: TF.js's layout (a texel is a 2x2 block): 2 / 8.
Fixed costs: an empty one-texel draw timed with and without the one-texel read-back after it, a program switch,
and the read-back of a whole output. Prints a table of milliseconds a draw (median and minimum of --reps).
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

HEAD = """#version 300 es
precision highp float;
precision highp int;
precision highp sampler2D;
#define W {w}
#define LW {lw}
ivec2 at(int e) {{ return ivec2(e & (W - 1), e >> LW); }}
uniform sampler2D tA;
uniform sampler2D tB;
"""

JS = r"""
window.micro = async (cfg) => {
  const canvas = document.createElement("canvas");
  const gl = canvas.getContext("webgl2");
  gl.getExtension("EXT_color_buffer_float");
  const W = cfg.width;
  const tex = (texels, data) => {
    const h = Math.ceil(texels / W), t = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, t);
    gl.texStorage2D(gl.TEXTURE_2D, 1, gl.RGBA32F, W, h);
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    if (data) {
      const full = new Float32Array(W * h * 4); full.set(data);
      gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, W, h, gl.RGBA, gl.FLOAT, full);
    }
    return {t: t, h: h};
  };
  const vsrc = "#version 300 es\nvoid main() { vec2 p = vec2(float((gl_VertexID << 1) & 2), float(gl_VertexID & 2));" +
               " gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0); }";
  const sh = (type, src) => { const s = gl.createShader(type); gl.shaderSource(s, src); gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s) + src); return s; };
  const vs = sh(gl.VERTEX_SHADER, vsrc);
  const prog = (src) => { const p = gl.createProgram(); gl.attachShader(p, vs);
    gl.attachShader(p, sh(gl.FRAGMENT_SHADER, src)); gl.linkProgram(p);
    if (!gl.getProgramParameter(p, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(p)); return p; };
  const fb = gl.createFramebuffer(), fb2 = gl.createFramebuffer();
  const probe = new Float32Array(4);
  const results = {};
  const textures = {};
  for (const [name, t] of Object.entries(cfg.tensors))
    textures[name] = tex(t.texels, new Float32Array(await (await fetch(t.url)).arrayBuffer()));
  const runs = cfg.variants.map(v => {
    const p = prog(v.shader);
    gl.useProgram(p);
    gl.uniform1i(gl.getUniformLocation(p, "tA"), 0);
    gl.uniform1i(gl.getUniformLocation(p, "tB"), 1);
    const outs = [];
    for (let r = 0; r < v.targets; r++) outs.push(tex(v.texels / v.targets, null));
    const final = tex(v.texels, null), per = v.texels / v.targets, rows = Math.ceil(per / W);
    const draw = () => {
      gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
      outs.forEach((o, r) => gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + r, gl.TEXTURE_2D, o.t, 0));
      gl.drawBuffers(outs.map((_, r) => gl.COLOR_ATTACHMENT0 + r));
      if (v.view) gl.viewport(0, 0, v.view[0], v.view[1]); else gl.viewport(0, 0, Math.min(W, per), rows);
      gl.useProgram(p);
      gl.activeTexture(gl.TEXTURE0); gl.bindTexture(gl.TEXTURE_2D, textures[v.a].t);
      gl.activeTexture(gl.TEXTURE1); gl.bindTexture(gl.TEXTURE_2D, textures[v.b].t);
      gl.drawArrays(gl.TRIANGLES, 0, 3);
      for (let r = 1; r < outs.length; r++)
        gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + r, gl.TEXTURE_2D, null, 0);
    };
    const copy = () => {        // the R partial textures into the output texture, each its rectangle
      gl.bindFramebuffer(gl.READ_FRAMEBUFFER, fb2);
      gl.bindTexture(gl.TEXTURE_2D, final.t);
      outs.forEach((o, r) => {
        gl.framebufferTexture2D(gl.READ_FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, o.t, 0);
        gl.readBuffer(gl.COLOR_ATTACHMENT0);
        const at = r * per;     // texel offset in the output (a whole number of rows, or within one row)
        gl.copyTexSubImage2D(gl.TEXTURE_2D, 0, at % W, Math.floor(at / W), 0, 0, Math.min(W, per), rows);
      });
      gl.bindFramebuffer(gl.READ_FRAMEBUFFER, null);
    };
    return {v: v, draw: draw, copy: copy, outs: outs, final: final, times: [], ctimes: []};
  });
  const sync = (t) => { gl.bindFramebuffer(gl.FRAMEBUFFER, fb2);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, t, 0);
    gl.readBuffer(gl.COLOR_ATTACHMENT0); gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe); };
  for (const r of runs) { r.draw(); if (r.v.targets > 1) r.copy(); sync(r.final.t); }    // warm-up (and the JIT)
  for (let i = 0; i < cfg.reps; i++) {          // variants alternated: the host's load falls on all alike
    for (const r of runs) {
      let t0 = performance.now(); r.draw(); sync(r.outs[0].t); r.times.push(performance.now() - t0);
      if (r.v.targets > 1) { t0 = performance.now(); r.copy(); sync(r.final.t); r.ctimes.push(performance.now() - t0); }
    }
  }
  for (const r of runs) {
    const src = r.v.targets > 1 ? r.final : r.outs[0];
    gl.bindFramebuffer(gl.FRAMEBUFFER, fb2);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, src.t, 0);
    const all = new Float32Array(W * src.h * 4);
    const t0 = performance.now();
    gl.readPixels(0, 0, W, src.h, gl.RGBA, gl.FLOAT, all);
    const readMs = performance.now() - t0;
    if (gl.getError() !== gl.NO_ERROR || gl.isContextLost()) throw new Error("WebGL error after " + r.v.name);
    results[r.v.name] = {times: r.times, copy: r.ctimes, read: readMs,
                         out: Array.from(all.subarray(0, r.v.texels * 4))};
  }
  // fixed costs: an empty draw of one texel, synced each time, and 50 of them synced once; a program switch
  const p1 = prog("#version 300 es\nprecision highp float; out vec4 o; void main() { o = vec4(1.0); }");
  const p2 = prog("#version 300 es\nprecision highp float; out vec4 o; void main() { o = vec4(2.0); }");
  const t1 = tex(4, null), t2 = tex(4, null);
  const one = (p, t) => { gl.bindFramebuffer(gl.FRAMEBUFFER, fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, t.t, 0);
    gl.drawBuffers([gl.COLOR_ATTACHMENT0]); gl.viewport(0, 0, 1, 1); gl.useProgram(p);
    gl.drawArrays(gl.TRIANGLES, 0, 3); };
  one(p1, t1); gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe);
  const fixed = {synced: [], batch50: [], switch50: []};
  for (let i = 0; i < cfg.reps; i++) {
    let t0 = performance.now(); one(p1, t1); gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe);
    fixed.synced.push(performance.now() - t0);
    t0 = performance.now(); for (let j = 0; j < 50; j++) one(p1, t1);
    gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe); fixed.batch50.push((performance.now() - t0) / 50);
    t0 = performance.now(); for (let j = 0; j < 50; j++) { one(p1, t1); one(p2, t2); }
    gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe); fixed.switch50.push((performance.now() - t0) / 100);
  }
  results.fixed = fixed;
  gl.getExtension("WEBGL_lose_context").loseContext();
  return results;
};
"""


def _shader_present(m, k, n, w, step=4):
    """A fragment: four outputs of one row; B^T [N, K]: a texel of four k per output."""
    lw = w.bit_length() - 1
    body = "".join(f"""
    {{ vec4 a = texelFetch(tA, at((am + kk + {u}) >> 2), 0);
      acc.x += dot(a, texelFetch(tB, at((b0 + kk + {u}) >> 2), 0));
      acc.y += dot(a, texelFetch(tB, at((b0 + {k} + kk + {u}) >> 2), 0));
      acc.z += dot(a, texelFetch(tB, at((b0 + {2 * k} + kk + {u}) >> 2), 0));
      acc.w += dot(a, texelFetch(tB, at((b0 + {3 * k} + kk + {u}) >> 2), 0)); }}""" for u in range(0, step, 4))
    return HEAD.format(w=w, lw=lw) + f"""out vec4 o;
void main() {{
  int g = 4 * (int(gl_FragCoord.y) * W + int(gl_FragCoord.x));
  int row = g / {n}, col = g % {n}, am = row * {k}, b0 = col * {k};
  vec4 acc = vec4(0.0);
  for (int kk = 0; kk < {k}; kk += {step}) {{{body}
  }}
  o = acc;
}}
"""


def _shader_vec4(m, k, n, w, targets=1, step=4):
    """R targets: target r is the rows m + r*M/R; B as [K, N]: a texel is four outputs' weights at one k."""
    lw = w.bit_length() - 1
    outs = "".join(f"layout(location = {r}) out vec4 o{r};\n" for r in range(targets))
    rows = m // targets
    body = []
    for u in range(0, step, 4):
        body.append(f"    {{ int kb = (kk + {u}) * {n // 4} + cb;")
        body += [f"      vec4 b{j} = texelFetch(tB, at(kb + {j * n // 4}), 0);" for j in range(4)]
        for r in range(targets):
            body.append(f"      vec4 a{r} = texelFetch(tA, at((am + {r * rows * k} + kk + {u}) >> 2), 0);")
            body.append(f"      acc{r} += a{r}.x * b0 + a{r}.y * b1 + a{r}.z * b2 + a{r}.w * b3;")
        body.append("    }")
    body = "\n".join(body)
    return HEAD.format(w=w, lw=lw) + outs + f"""void main() {{
  int g = 4 * (int(gl_FragCoord.y) * W + int(gl_FragCoord.x));
  int row = g / {n}, col = g % {n}, am = row * {k}, cb = col >> 2;
  {' '.join(f'vec4 acc{r} = vec4(0.0);' for r in range(targets))}
  for (int kk = 0; kk < {k}; kk += {step}) {{
{body}
  }}
  {' '.join(f'o{r} = acc{r};' for r in range(targets))}
}}
"""


def _shader_mrt_bt(m, k, n, w, targets=4):
    """R targets as _shader_vec4, B read as B^T [N, K] (fxc's weight layout of a linear layer): four texels of four
    k, one per output column, shared by the R rows."""
    lw = w.bit_length() - 1
    outs = "".join(f"layout(location = {r}) out vec4 o{r};\n" for r in range(targets))
    rows = m // targets
    body = [f"    vec4 b{j} = texelFetch(tB, at((bt + {j * k} + kk) >> 2), 0);" for j in range(4)]
    for r in range(targets):
        body.append(f"    vec4 a{r} = texelFetch(tA, at((am + {r * rows * k} + kk) >> 2), 0);")
        body.append(f"    acc{r} += vec4(dot(a{r}, b0), dot(a{r}, b1), dot(a{r}, b2), dot(a{r}, b3));")
    body = "\n".join(body)
    return HEAD.format(w=w, lw=lw) + outs + f"""void main() {{
  int g = 4 * (int(gl_FragCoord.y) * W + int(gl_FragCoord.x));
  int row = g / {n}, col = g % {n}, am = row * {k}, bt = col * {k};
  {' '.join(f'vec4 acc{r} = vec4(0.0);' for r in range(targets))}
  for (int kk = 0; kk < {k}; kk += 4) {{
{body}
  }}
  {' '.join(f'o{r} = acc{r};' for r in range(targets))}
}}
"""


def _shader_packed(m, k, n, w):
    """TF.js's layout: a texel is a 2x2 block (rows i, i+1 x cols j, j+1: x, y / z, w); A [M/2, K/2], B [K/2, N/2]."""
    lw = w.bit_length() - 1
    return HEAD.format(w=w, lw=lw) + f"""out vec4 o;
void main() {{
  int q = int(gl_FragCoord.y) * W + int(gl_FragCoord.x);
  int bi = q / {n // 2}, bj = q % {n // 2};
  vec4 acc = vec4(0.0);
  int ab = bi * {k // 2};
  for (int kb = 0; kb < {k // 2}; kb++) {{
    vec4 a = texelFetch(tA, at(ab + kb), 0), b = texelFetch(tB, at(kb * {n // 2} + bj), 0);
    acc += a.xxzz * b.xyxy + a.yyww * b.zwzw;
  }}
  o = acc;
}}
"""


def _fxc_shader(path, w):
    """A shader fxc wrote (texture width and sampler names adapted; its epilogue inputs read A: its error is n/a)."""
    import re
    s = open(path).read()
    s = re.sub(r"#define FXC_W \d+", f"#define FXC_W {w}", s)
    s = re.sub(r"ivec2 fxc_at\(int e\) \{[^}]*\}", f"ivec2 fxc_at(int e) {{ return ivec2(e & {w - 1}, e >> "
               f"{w.bit_length() - 1}); }}", s)
    return s.replace("fxc_t1;", "tA;").replace("fxc_t2;", "tB;").replace("fxc_t1,", "tA,").replace("fxc_t2,", "tB,")


def _no_nan(s):
    """A max without its NaN tests: ((isnan(a) || isnan(b)) ? (a + b) : max(a, b)) -> max(a, b)."""
    import re
    return re.sub(r"\(\(isnan\((\w+)\) \|\| isnan\(([\w.]+)\)\) \? \(\w+ \+ [\w.]+\) : (max\(\w+, [\w.]+\))\)",
                  r"\3", s)


def _blocks(x):
    """[R, C] -> [R/2, C/2, 4] (a 2x2 block per texel: x, y the first row, z, w the second)."""
    r, c = x.shape
    return x.reshape(r // 2, 2, c // 2, 2).transpose(0, 2, 1, 3).reshape(-1)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--m", type=int, default=128)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--fxc-shader", help="also time this fxc shader (variant fxc; e.g. a matmul + add of 128x1024 @ "
                   "1024x256 dumped from a program's JSON)")
    p.add_argument("--amax-shader", help="a row max of 512 rows of 128 (BERT's softmax max) from fxc: variants "
                   "amax_1024 / amax_128 (a draw 1024 or 128 fragments wide), amax_nonan_* (without the NaN tests)")
    p.add_argument("--fxc-mrt-shader", help="also time this fxc shader of 4 render targets (variant fxc_mrt)")
    p.add_argument("--variants", default="present,vec4,mrt2,mrt4,mrt8,mrt4_8,packed2x2")
    args = p.parse_args(argv)
    from fxc.runtime.browser.page import open_browser
    m, k, n, w = args.m, args.k, args.n, args.width
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = a @ b
    tensors = {"A": a.reshape(-1), "BT": b.T.copy().reshape(-1), "B": b.reshape(-1), "Ap": _blocks(a),
               "Bp": _blocks(b)}
    makers = {"present": lambda: (_shader_present(m, k, n, w), 1, "A", "BT"),
              "present8": lambda: (_shader_present(m, k, n, w, 8), 1, "A", "BT"),
              "vec4": lambda: (_shader_vec4(m, k, n, w), 1, "A", "B"),
              "vec4_8": lambda: (_shader_vec4(m, k, n, w, 1, 8), 1, "A", "B"),
              "mrt2": lambda: (_shader_vec4(m, k, n, w, 2), 2, "A", "B"),
              "mrt4": lambda: (_shader_vec4(m, k, n, w, 4), 4, "A", "B"),
              "mrt4t": lambda: (_shader_mrt_bt(m, k, n, w), 4, "A", "BT"),
              "mrt8": lambda: (_shader_vec4(m, k, n, w, 8), 8, "A", "B"),
              "mrt4_8": lambda: (_shader_vec4(m, k, n, w, 4, 8), 4, "A", "B"),
              "packed2x2": lambda: (_shader_packed(m, k, n, w), 1, "Ap", "Bp"),
              "fxc": lambda: (_fxc_shader(args.fxc_shader, w), 1, "A", "BT"),
              "amax_1024": lambda: (_fxc_shader(args.amax_shader, w), 1, "A", "A", [w, 1]),
              "amax_128": lambda: (_fxc_shader(args.amax_shader, w), 1, "A", "A", [128, 1]),
              "amax_nonan_1024": lambda: (_no_nan(_fxc_shader(args.amax_shader, w)), 1, "A", "A", [w, 1]),
              "amax_nonan_128": lambda: (_no_nan(_fxc_shader(args.amax_shader, w)), 1, "A", "A", [128, 1]),
              "fxc_mrt": lambda: (_fxc_shader(args.fxc_mrt_shader, w), 4, "A", "BT")}
    variants = []
    for name in args.variants.split(","):
        shader, targets, ta, tb, *view = makers[name]()
        variants.append({"name": name, "shader": shader, "targets": targets, "a": ta, "b": tb,
                         "texels": 128 if name.startswith("amax") else m * n // 4, "view": view[0] if view else None})
    page = open_browser().page("glmicro", [], "() => ({})")
    page.call("() => {" + JS + "}")
    cfg = {"width": w, "reps": args.reps, "variants": variants,
           "tensors": {name: {"texels": -(-t.size // 4), "url": page.put(f"{name}.bin", t.tobytes())}
                       for name, t in tensors.items()}}
    res = page.call("(cfg) => window.micro(cfg)", cfg)
    print(f"C = A @ B, {m}x{k} @ {k}x{n} ({m * k * n / 1e6:.1f} M multiply-adds), texture width {w}, "
          f"{args.reps} reps")
    print("| variant | ms a draw (median, min) | + copy of the parts (ms) | read-back of C (ms) | G MAC/s | max err |")
    print("|---|---|---|---|---|---|")
    for v in variants:
        r = res[v["name"]]
        out = np.asarray(r["out"], np.float32)
        if v["name"].startswith("amax"):
            err = float(np.abs(out - a.reshape(-1)[:65536].reshape(512, 128).max(1)).max())
        else:
            got = out.reshape(m // 2, n // 2, 2, 2).transpose(0, 2, 1, 3).reshape(m, n) if v["name"] == "packed2x2" \
                else out.reshape(m, n)
            err = float(np.abs(got - ref).max())
        med = statistics.median(r["times"])
        copy = f"{statistics.median(r['copy']):.2f}" if r["copy"] else "-"
        print(f"| {v['name']} | {med:.1f}, {min(r['times']):.1f} | {copy} | {r['read']:.2f} | "
              f"{m * k * n / med / 1e6:.2f} | {err:.1e} |")
    f = res["fixed"]
    print(f"fixed costs (ms, median of {args.reps}): an empty 1-texel draw + 1-texel read-back "
          f"{statistics.median(f['synced']):.3f}; a draw in a batch of 50, one read-back "
          f"{statistics.median(f['batch50']):.3f}; alternating two programs and two framebuffer textures "
          f"{statistics.median(f['switch50']):.3f}")


if __name__ == "__main__":
    main()
