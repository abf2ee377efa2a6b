// fxc's WebGL 2 plan runtime: runs a model compiled for the `webgl` target (fxc.runtime.browser.webgl.layout gives `desc`).
//
//   const m = new FxcWebGL();                  // a WebGL 2 context with float render targets, or an Error
//   m.load(desc, consts);                      // compiles every program once, makes the textures, uploads consts
//   const {outputs} = m.run(inputs);           // typed arrays in (null: keep what the input's texture holds)
//   m.run(inputs, false, s);                   // a symbolic batch (desc.symbol): any size s in its range
//   const pkg = await fxcLoadPackage("./");    // a static package (fxc web): fetch, check sha256, load
//
// Every tensor place (slot) of the plan is a 2-D texture `width` texels wide, `desc.lanes` consecutive elements a
// texel: RGBA32F for float32, RGBA32I for every integer type (the host narrows them to 32 bits); lanes 1 (older
// programs): R32F / R32I. A launch draws one triangle over its output's rows; each fragment computes `lanes`
// elements. Nothing leaves the GPU between launches: a call uploads the inputs it is given,
// draws the plan and reads the outputs back.
// A symbolic plan (fxc/driver/rows.py) runs a row step per block of rows: its kernel's uniforms fxc_q<j> move each
// parameter by whole texels to the block's first row, and the draw covers the texture rows of the block's output
// range (the shader discards the fragments outside it). Slots with rows ("per" elements per unit of the symbol)
// grow, to twice the size they held within the symbol's range, when a call's size exceeds it.
// A kernel with render targets (fxc/backends/webgl/draw_buffers.py: "targets" parts of "split" texels) draws the first
// part's rows into that many part textures at once (a fragment writes one texel of each), then copies part r to
// the output's texels [r * split, (r + 1) * split) (copyTexSubImage2D); with "block" (runs of that many texels:
// e.g. output pixels within one channel block), part r's run j to the output's [(j * targets + r) * block, ...).
// A lost context (a shader the GPU's compiler hung on, the browser reclaiming the GPU, WEBGL_lose_context) is an
// Error whose message begins "the WebGL context was lost" (fxc.runtime.browser.webgl turns it into a DeviceLostError and
// loads its models into a fresh context): load and run check gl.isContextLost() after each link and after reading
// the outputs, so a lost context never hands back zeros or "compile failed: null".
"use strict";

const FXC_LOST = "the WebGL context was lost";

class FxcWebGL {
  constructor(base) {               // base: another FxcWebGL whose context this one shares (one per page)
    if (base) { Object.assign(this, {gl: base.gl, fb: base.fb, maxTexture: base.maxTexture, vs: base.vs}); return; }
    const canvas = document.createElement("canvas");
    canvas.addEventListener("webglcontextlost", e => { e.preventDefault(); }, false);   // isContextLost() tells
    const gl = canvas.getContext("webgl2", {antialias: false, depth: false, stencil: false,
                                            preserveDrawingBuffer: false});
    if (!gl) throw new Error("this browser has no WebGL 2 context (enable hardware acceleration or use Chromium " +
                             "with --use-angle=swiftshader)");
    if (!gl.getExtension("EXT_color_buffer_float"))
      throw new Error("this browser's WebGL 2 cannot render to float textures (no EXT_color_buffer_float)");
    this.gl = gl;
    const info = gl.getExtension("WEBGL_debug_renderer_info");
    this.renderer = gl.getParameter(info ? info.UNMASKED_RENDERER_WEBGL : gl.RENDERER);
    this.fb = gl.createFramebuffer();
    this.maxTexture = gl.getParameter(gl.MAX_TEXTURE_SIZE);
    const vs = "#version 300 es\nvoid main() { vec2 p = vec2(float((gl_VertexID << 1) & 2), " +
               "float(gl_VertexID & 2)); gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0); }";
    this.vs = this.shader(gl.VERTEX_SHADER, vs, "(vertex)");
  }

  checkLost(what) {      // an Error if the context is lost (what: while doing what)
    if (this.gl.isContextLost()) throw new Error(`${FXC_LOST} ${what}`);
  }

  shader(type, source, name) {
    const gl = this.gl, s = gl.createShader(type);
    gl.shaderSource(s, source);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) {
      this.checkLost(`while compiling kernel ${name}`);     // not a compile error: its log would be null
      throw new Error("shader compile failed: " + gl.getShaderInfoLog(s) + "\n" + source);
    }
    return s;
  }

  texture(slot) {         // slot: {float, elements}
    const gl = this.gl, w = this.width, h = Math.max(1, Math.ceil(slot.elements / (w * this.lanes)));
    if (h > this.maxTexture) throw new Error(`a tensor of ${slot.elements} elements needs a ${w}x${h} texture; ` +
                                             `MAX_TEXTURE_SIZE is ${this.maxTexture}`);
    const t = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, t);
    const rgba = this.lanes === 4;
    gl.texStorage2D(gl.TEXTURE_2D, 1, slot.float ? (rgba ? gl.RGBA32F : gl.R32F) : (rgba ? gl.RGBA32I : gl.R32I), w, h);
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    return {tex: t, h: h, float: slot.float, elements: slot.elements};
  }

  upload(t, data) {       // whole rows, then the last partial row (only its last texel padded)
    const gl = this.gl, n = this.lanes, w = this.width, per = w * n;
    const rows = Math.floor(data.length / per), texels = Math.ceil((data.length - rows * per) / n);
    const fmt = n === 4 ? (t.float ? gl.RGBA : gl.RGBA_INTEGER) : (t.float ? gl.RED : gl.RED_INTEGER);
    const type = t.float ? gl.FLOAT : gl.INT;
    gl.bindTexture(gl.TEXTURE_2D, t.tex);
    gl.pixelStorei(gl.UNPACK_ALIGNMENT, 4);
    if (rows) gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, w, rows, fmt, type, data.subarray(0, rows * per));
    if (texels) {
      let rest = data.subarray(rows * per);
      if (rest.length !== texels * n) { const p = new rest.constructor(texels * n); p.set(rest); rest = p; }
      gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, rows, texels, 1, fmt, type, rest);
    }
  }

  load(desc, consts) {    // desc: fxc.runtime.browser.webgl.layout; consts: typed arrays in desc.consts' order
    const gl = this.gl;
    this.desc = desc;
    this.width = desc.width;
    this.lanes = desc.lanes || 1;
    this.textures = desc.slots.map(s => this.texture(s));
    this.programs = {};
    for (const [name, k] of Object.entries(desc.kernels)) {
      const p = gl.createProgram();
      gl.attachShader(p, this.vs);
      gl.attachShader(p, this.shader(gl.FRAGMENT_SHADER, k.shader, name));
      gl.linkProgram(p);
      const linked = gl.getProgramParameter(p, gl.LINK_STATUS);   // waits for the link
      this.checkLost(`while linking kernel ${name}`);
      if (!linked) throw new Error(`link failed (${name}): ` + gl.getProgramInfoLog(p));
      this.programs[name] = {prog: p, output: k.output, units: null, qs: null, targets: k.targets || 1,
                             split: k.split || 0, block: k.block || k.split || 0,
                             tiles: k.tiles || 1,
                             parts: k.targets > 1 ? this.parts(k.targets, k.split, k.tiles || 1) : null};
    }
    // each step's texture units bound once per call; uniforms (sampler units) set here, once per program
    this.steps = desc.steps.map((step, i) => {
      if (step.wasm) return {host: fxcWasmStep(this, step, i)};  // a group WebGL refused (wasm/webgl_steps.js)
      const k = this.programs[step.kernel], inputs = [];
      step.slots.forEach((slot, j) => { if (j !== k.output) inputs.push([j, this.textures[slot]]); });
      if (k.units === null) {
        gl.useProgram(k.prog);
        k.units = inputs.map(([j], unit) => {
          const loc = gl.getUniformLocation(k.prog, "fxc_t" + j);
          if (loc) gl.uniform1i(loc, unit);
          return loc;
        });
      }
      if (k.qs === null) k.qs = step.slots.map((_, j) => gl.getUniformLocation(k.prog, "fxc_q" + j));
      return {k: k, out: step.slots[k.output], rows: step.rows, cols: step.cols || this.width,
              inputs: inputs.map(([j]) => step.slots[j]), step: step};
    });
    this.cap = 0;                       // the size of the symbol the slots with rows hold
    this.plans = new Map();             // size -> its draws (symbolic plans)
    consts.forEach((data, i) => this.upload(this.textures[desc.consts[i].slot], data));
  }

  parts(n, split, tiles) {   // n part textures of `split` texels (shared by the kernels of that shape; drawn as
    const gl = this.gl;       // `tiles` tiles: `tiles` times the rows) and the draw's framebuffer of n attachments
    this.partTextures = this.partTextures || {};
    this.fbs = this.fbs || {};
    if (!this.fbs[n]) {
      this.fbs[n] = gl.createFramebuffer();
      gl.bindFramebuffer(gl.FRAMEBUFFER, this.fbs[n]);
      gl.drawBuffers(Array.from({length: n}, (_, r) => gl.COLOR_ATTACHMENT0 + r));
      gl.bindFramebuffer(gl.FRAMEBUFFER, null);
    }
    const key = `${n}:${split}:${tiles}`;
    if (!this.partTextures[key])
      this.partTextures[key] = Array.from({length: n},
                                          () => this.texture({float: true, elements: split * tiles * this.lanes}));
    return this.partTextures[key];
  }

  gather(k, out) {        // the parts of a draw with render targets into their places in the output texture
    const gl = this.gl, W = this.width, S = k.split, B = k.block || S, R = k.targets;
    this.fbRead = this.fbRead || gl.createFramebuffer();
    gl.bindFramebuffer(gl.READ_FRAMEBUFFER, this.fbRead);
    gl.activeTexture(gl.TEXTURE0);
    gl.bindTexture(gl.TEXTURE_2D, out.tex);
    const copy = (dx, dy, sx, sy, w, h) => {
      if (w > 0 && h > 0) gl.copyTexSubImage2D(gl.TEXTURE_2D, 0, dx, dy, sx, sy, w, h);
    };
    // texels [from, from + n) of a part to the output's [at, at + n), both W wide: the source's first row piece
    // (at most two rectangles), then whole source rows (a row's first W - o texels end a row of the output, its
    // other o begin the next: two rectangles), then the last piece (two)
    const range = (from, at, n) => {
      const head = Math.min(n, (W - from % W) % W);
      for (let i = 0; i < head;) {
        const w = Math.min(head - i, W - (at + i) % W);
        copy((at + i) % W, Math.floor((at + i) / W), (from + i) % W, Math.floor((from + i) / W), w, 1);
        i += w;
      }
      from += head; at += head; n -= head;
      const o = at % W, y = Math.floor(at / W), sy = Math.floor(from / W), full = Math.floor(n / W);
      const rest = n - full * W;
      copy(o, y, 0, sy, W - o, full);
      copy(0, y + 1, W - o, sy, o, full);
      const a = Math.min(rest, W - o);
      copy(o, y + full, 0, sy + full, a, 1);
      copy(0, y + full + 1, a, sy + full, rest - a, 1);
    };
    // part r's run j (B texels; B = S: the part is one run) goes to the output's texels j * R * B + r * B; a part
    // drawn as T tiles (whole rows: S / W of them, each tile W / T texels wide) goes tile by tile
    const T = k.tiles, rows = S / W, tw = W / T;
    k.parts.forEach((p, r) => {
      gl.framebufferTexture2D(gl.READ_FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, p.tex, 0);
      if (T > 1) for (let t = 0; t < T; t++) copy(t * tw, r * rows, 0, t * rows, tw, rows);
      else for (let j = 0; j * B < S; j++) range(j * B, (j * R + r) * B, B);
    });
    gl.bindTexture(gl.TEXTURE_2D, null);
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, out.tex, 0);
  }

  grow(s) {               // the slots with rows sized for s (to twice what they held, within the symbol's range)
    const sym = this.desc.symbol;
    if (!(s >= sym.min && s <= sym.max)) throw new Error(`size ${s} of ${sym.name} is outside [${sym.min}, ${sym.max}]`);
    if (s <= this.cap) return;
    const cap = Math.max(s, Math.min(2 * this.cap, sym.max, this.desc.fit));     // fit: what MAX_TEXTURE_SIZE holds
    this.desc.slots.forEach((slot, i) => {
      if (!slot.per) return;
      this.gl.deleteTexture(this.textures[i].tex);
      this.textures[i] = this.texture({float: slot.float, elements: slot.elements + slot.per * cap});
    });
    this.cap = cap;
  }

  draws(s) {              // [step, texel offset per parameter or null, viewport [x, y, w, h]] of a call at size s
    const W = this.width;
    if (!this.desc.symbol)
      return this.fixed || (this.fixed = this.steps.map(st => [st, null, [0, 0, st.cols, st.rows]]));
    let got = this.plans.get(s);
    if (got) return got;
    got = [];
    const steps = this.steps;
    for (let i = 0; i < steps.length;) {
      const rep = steps[i].step && steps[i].step.repeat, key = rep ? rep.join() : null;
      let j = i + 1;
      while (key !== null && j < steps.length && steps[j].step && steps[j].step.repeat &&
             steps[j].step.repeat.join() === key) j++;
      if (key === null) { got.push([steps[i], null, [0, 0, steps[i].cols, steps[i].rows]]); i++; continue; }
      // part 0: blocks; a later part: the rows from s - s % m the parts before it left, the last part all of them
      // in launches of `unit` rows, another one launch when s % m >= unit (fxc/runtime/row_plan.py's expand)
      const [, block, part, unit = 1, m = block, last = 1] = rep, first = s - s % m;
      const starts = [];
      if (part === 0) for (let r = 0; r + block <= s; r += block) starts.push(r);
      else if (last) for (let r = first; r < s; r += unit) starts.push(r);
      else if (s % m >= unit) starts.push(first);
      for (const r of starts) {
        for (let q = i; q < j; q++) {
          const st = steps[q].step, offs = st.per.map(p => r * p / 4), o = offs[steps[q].k.output];
          const end = o + Math.ceil(st.n / 4), y0 = Math.floor(o / W), y1 = Math.ceil(end / W);
          // the texture rows of the output's texels [o, end); within one row, just its texels
          got.push([steps[q], offs, y1 - y0 === 1 ? [o % W, y0, end - o, 1] : [0, y0, W, y1 - y0]]);
        }
      }
      i = j;
    }
    if (this.plans.size >= 64) this.plans.clear();
    this.plans.set(s, got);
    return got;
  }

  run(inputs, profile, size) {  // inputs: typed arrays in desc.inputs' order (null: unchanged); {outputs, times}
    const gl = this.gl, times = profile ? [] : null;
    this.checkLost("before this call (it was lost earlier)");
    if (this.desc.symbol) this.grow(size);
    inputs.forEach((data, i) => { if (data !== null) this.upload(this.textures[this.desc.inputs[i].slot], data); });
    this.fresh = inputs.map(data => data !== null);     // which inputs changed (a wasm step reads those again)
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
    const probe = new Float32Array(4), iprobe = new Int32Array(4);
    for (const [s, offs, view] of this.draws(size)) {
      const t0 = profile ? performance.now() : 0;
      if (s.host) {                       // a wasm step: {fault} stops the plan (fxc.runtime.browser.wasm.wasm_fault)
        const fault = s.host();
        if (fault) return {outputs: [], times: times, fault: fault};
        gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
        if (profile) times.push(performance.now() - t0);
        continue;
      }
      const out = this.textures[s.out];
      if (s.k.parts) {
        gl.bindFramebuffer(gl.FRAMEBUFFER, this.fbs[s.k.targets]);
        s.k.parts.forEach((p, r) => gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0 + r, gl.TEXTURE_2D,
                                                            p.tex, 0));
      } else gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, out.tex, 0);
      gl.viewport(...view);    // not the texture's rows: a discarded fragment costs as much as any
      gl.useProgram(s.k.prog);
      if (offs) s.k.qs.forEach((loc, j) => { if (loc) gl.uniform1i(loc, offs[j]); });
      s.inputs.forEach((t, unit) => {
        gl.activeTexture(gl.TEXTURE0 + unit);
        gl.bindTexture(gl.TEXTURE_2D, this.textures[t].tex);
      });
      gl.drawArrays(gl.TRIANGLES, 0, 3);
      for (let u = 0; u < s.inputs.length; u++) {
        gl.activeTexture(gl.TEXTURE0 + u);
        gl.bindTexture(gl.TEXTURE_2D, null);
      }
      if (s.k.parts) this.gather(s.k, out);
      if (profile) {        // a one-texel read waits for the draw
        if (out.float) gl.readPixels(0, 0, 1, 1, gl.RGBA, gl.FLOAT, probe);
        else gl.readPixels(0, 0, 1, 1, gl.RGBA_INTEGER, gl.INT, iprobe);
        times.push(performance.now() - t0);
        this.checkLost(`while running kernel ${s.step.kernel}`);
      }
    }
    const outputs = this.desc.outputs.map(o => this.read(this.textures[o.slot],
                                                          o.per ? o.per * size : o.shape.reduce((a, b) => a * b, 1)));
    // after the read-back (which waits for every draw): a context lost meanwhile reads zeros
    const drawn = this.steps.filter(st => !st.host).map(st => st.step.kernel);
    this.checkLost(`while running the plan (its draws: ${[...new Set(drawn)].join(", ")})`);
    const err = gl.getError();
    if (err !== gl.NO_ERROR) throw new Error(`WebGL error ${err} while running the plan`);
    return {outputs: outputs, times: times};
  }

  dispose() {             // the model's textures and programs (the context, framebuffer and vertex shader stay)
    const gl = this.gl;
    for (const t of this.textures || []) gl.deleteTexture(t.tex);
    for (const ps of Object.values(this.partTextures || {})) for (const t of ps) gl.deleteTexture(t.tex);
    for (const f of [...Object.values(this.fbs || {}), this.fbRead]) if (f) gl.deleteFramebuffer(f);
    this.partTextures = {};
    this.fbs = {};
    this.fbRead = null;
    for (const k of Object.values(this.programs || {})) {
      for (const s of gl.getAttachedShaders(k.prog)) if (s !== this.vs) gl.deleteShader(s);
      gl.deleteProgram(k.prog);
    }
    this.textures = [];
    this.programs = {};
  }

  read(t, elements) {
    const gl = this.gl, w = this.width, n = this.lanes;
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, t.tex, 0);
    const rows = Math.max(1, Math.ceil(elements / (w * n))), rgba = new (t.float ? Float32Array : Int32Array)(4 * w * rows);
    gl.readPixels(0, 0, w, rows, t.float ? gl.RGBA : gl.RGBA_INTEGER, t.float ? gl.FLOAT : gl.INT, rgba);
    if (n === 4) return rgba.subarray(0, elements);
    const out = new (t.float ? Float32Array : Int32Array)(elements);
    for (let i = 0; i < elements; i++) out[i] = rgba[4 * i];
    return out;
  }
}

function fxcRelease(ids) {              // models of the RPC page that Python has collected
  for (const id of ids) { if (window.fxcModels[id]) { window.fxcModels[id].dispose(); delete window.fxcModels[id]; } }
}

// binary data to and from the page (fxc.runtime.browser.page serves and receives it; fxc.runtime.browser.webgl.pack lays it out)
function fxcView(buf, rec) {            // rec: {offset, elements, float}
  return new (rec.float ? Float32Array : Int32Array)(buf, rec.offset, rec.elements);
}

function fxcBytes(arrays) {              // typed arrays of 4-byte elements, one after another, as one Uint8Array
  const bytes = new Uint8Array(arrays.reduce((n, a) => n + a.byteLength, 0));
  let at = 0;
  for (const a of arrays) { bytes.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), at); at += a.byteLength; }
  return bytes;
}
async function fxcPost(url, arrays) {   // the arrays (fxcBytes) sent back to the harness's server
  const r = await fetch(url, {method: "POST", body: fxcBytes(arrays)});
  if (!r.ok) throw new Error(`sending the outputs failed: HTTP ${r.status}`);
}
// the static package (fxc web) loads through fxc/runtime/browser/web_package.js
