// fxc's WebGL 2 plan runtime: runs a model compiled for the `webgl` target (fxc.backends.glsl.render_webgl).
//
//   const m = new FxcWebGL();                   // a WebGL 2 context with float render targets, or an Error
//   m.load(program, plan, slots, consts);       // program: {width, kernels: {name: {shader, output, params}}}
//   const outs = m.run(inputs);                 // typed arrays in (Float32Array / Int32Array), typed arrays out
//
// Every tensor slot (an input, output, constant or workspace place of the plan) is a 2-D texture `width` texels
// wide: R32F for float32, R32I for every integer type (the host narrows them to 32 bits). A launch draws one
// triangle over its output texture; each fragment computes one element.
"use strict";

class FxcWebGL {
  constructor(base) {               // base: another FxcWebGL whose context this one shares (one per page)
    if (base) { Object.assign(this, {gl: base.gl, fb: base.fb, maxTexture: base.maxTexture, vs: base.vs}); return; }
    const canvas = document.createElement("canvas");
    const gl = canvas.getContext("webgl2", {antialias: false, depth: false, stencil: false,
                                            preserveDrawingBuffer: false});
    if (!gl) throw new Error("this browser has no WebGL 2 context");
    if (!gl.getExtension("EXT_color_buffer_float"))
      throw new Error("this browser's WebGL 2 cannot render to float textures (no EXT_color_buffer_float)");
    this.gl = gl;
    this.fb = gl.createFramebuffer();
    this.maxTexture = gl.getParameter(gl.MAX_TEXTURE_SIZE);
    const vs = "#version 300 es\nvoid main() { vec2 p = vec2(float((gl_VertexID << 1) & 2), " +
               "float(gl_VertexID & 2)); gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0); }";
    this.vs = this.shader(gl.VERTEX_SHADER, vs);
  }

  shader(type, source) {
    const gl = this.gl, s = gl.createShader(type);
    gl.shaderSource(s, source);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) {
      const log = gl.getShaderInfoLog(s);
      throw new Error("shader compile failed: " + log + "\n" + source);
    }
    return s;
  }

  texture(slot) {         // slot: {float, elements}
    const gl = this.gl, w = this.width, h = Math.max(1, Math.ceil(slot.elements / w));
    if (h > this.maxTexture) throw new Error(`a tensor of ${slot.elements} elements needs a ${w}x${h} texture; ` +
                                             `MAX_TEXTURE_SIZE is ${this.maxTexture}`);
    const t = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, t);
    gl.texStorage2D(gl.TEXTURE_2D, 1, slot.float ? gl.R32F : gl.R32I, w, h);
    for (const p of [gl.TEXTURE_MIN_FILTER, gl.TEXTURE_MAG_FILTER]) gl.texParameteri(gl.TEXTURE_2D, p, gl.NEAREST);
    return {tex: t, h: h, float: slot.float, elements: slot.elements};
  }

  upload(t, data) {
    const gl = this.gl, w = this.width, full = new (t.float ? Float32Array : Int32Array)(w * t.h);
    full.set(data);
    gl.bindTexture(gl.TEXTURE_2D, t.tex);
    gl.texSubImage2D(gl.TEXTURE_2D, 0, 0, 0, w, t.h, t.float ? gl.RED : gl.RED_INTEGER,
                     t.float ? gl.FLOAT : gl.INT, full);
  }

  load(program, plan, slots, consts) {
    const gl = this.gl;
    this.width = program.width;
    this.textures = slots.map(s => this.texture(s));
    this.programs = {};
    for (const [name, k] of Object.entries(program.kernels)) {
      const p = gl.createProgram();
      gl.attachShader(p, this.vs);
      gl.attachShader(p, this.shader(gl.FRAGMENT_SHADER, k.shader));
      gl.linkProgram(p);
      if (!gl.getProgramParameter(p, gl.LINK_STATUS)) throw new Error("link failed: " + gl.getProgramInfoLog(p));
      const units = k.params.map((_, j) => j === k.output ? null : gl.getUniformLocation(p, "fxc_t" + j));
      this.programs[name] = {prog: p, units: units, output: k.output};
    }
    this.plan = plan;                 // [{kernel, slots: [slot index per param]}]
    for (const [slot, data] of consts) this.upload(this.textures[slot], data);
  }

  run(inputs, outputSlots) {          // inputs: [[slot, typed array]]; returns typed arrays of the output slots
    const gl = this.gl;
    for (const [slot, data] of inputs) this.upload(this.textures[slot], data);
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
    for (const step of this.plan) {
      const k = this.programs[step.kernel], out = this.textures[step.slots[k.output]];
      gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, out.tex, 0);
      gl.viewport(0, 0, this.width, out.h);
      gl.useProgram(k.prog);
      let unit = 0;
      step.slots.forEach((slot, j) => {
        if (k.units[j] === null) return;
        gl.activeTexture(gl.TEXTURE0 + unit);
        gl.bindTexture(gl.TEXTURE_2D, this.textures[slot].tex);
        if (k.units[j]) gl.uniform1i(k.units[j], unit);
        unit += 1;
      });
      gl.drawArrays(gl.TRIANGLES, 0, 3);
      for (let u = 0; u < unit; u++) { gl.activeTexture(gl.TEXTURE0 + u); gl.bindTexture(gl.TEXTURE_2D, null); }
    }
    return outputSlots.map(slot => this.read(this.textures[slot]));
  }

  read(t) {
    const gl = this.gl, w = this.width;
    gl.bindFramebuffer(gl.FRAMEBUFFER, this.fb);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, t.tex, 0);
    const rgba = new (t.float ? Float32Array : Int32Array)(4 * w * t.h);
    gl.readPixels(0, 0, w, t.h, t.float ? gl.RGBA : gl.RGBA_INTEGER, t.float ? gl.FLOAT : gl.INT, rgba);
    const out = new (t.float ? Float32Array : Int32Array)(t.elements);
    for (let i = 0; i < t.elements; i++) out[i] = rgba[4 * i];
    return out;
  }
}

// base64 <-> typed arrays (the RPC from Python passes strings)
function fxcDecode(b64, isFloat) {
  const s = atob(b64), bytes = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
  return isFloat ? new Float32Array(bytes.buffer) : new Int32Array(bytes.buffer);
}

function fxcEncode(arr) {
  const bytes = new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
