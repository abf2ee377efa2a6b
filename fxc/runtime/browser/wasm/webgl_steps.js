// The boundary between a WebGL plan (fxc/runtime/browser/webgl/runtime.js) and the wasm kernels of the groups WebGL cannot
// express (fxc.driver.page_kernels): a step of the plan that calls an entry of the model's wasm module (FxcWasm, loaded into
// `model.wasm` before `model.load`). Its inputs are read from their textures into the module's memory in the
// group's own dtypes (int64 sign-extended, bool and bytes narrowed), the entry runs, and its outputs go back into
// their textures (integers as int32: an int64 value beyond 32 bits is a fault, never a wrong value). A constant is
// read from its texture once, a model input again only when the call uploaded it (model.fresh); an input that an
// earlier wasm step of the call wrote (and no draw since: step.from) is that step's output buffer itself.
//
//   const run = fxcWasmStep(model, step, i); // step i of the plan: fxc.runtime.browser.webgl.wasm_step's layout
//   const fault = run();                    // null, or {entry, rc, record} (fxc.runtime.browser.wasm.wasm_fault names it)
"use strict";

const FXC_MEMORY = {float32: Float32Array, int32: Int32Array, int64: BigInt64Array, int16: Int16Array,
                    int8: Int8Array, uint8: Uint8Array, bool: Uint8Array};
const FXC_NARROW_FAULT = 1 << 8;

function fxcWasmStep(model, step, index) {   // index: the step's place in the plan (step.from names earlier ones)
  const w = model.wasm;
  if (!w) throw new Error(`${step.wasm}: the plan has wasm kernels but no wasm module was loaded`);
  const held = model.wasmOutputs = model.wasmOutputs || {};       // step index -> its output buffers
  const bufs = step.params.map(([dtype, n], p) => {
    const T = FXC_MEMORY[dtype], from = step.from[p], src = from && held[from[0]][from[1]];
    if (src && src.T === T) return {T, n, at: src.at, kept: true};  // an earlier wasm step's output: no read-back
    return {T, n, at: w.alloc(n * T.BYTES_PER_ELEMENT), kept: false, fixed: step.const[p], input: step.input[p],
            loaded: false};
  });
  const outs = bufs.slice(0, step.outputs), ins = bufs.slice(step.outputs);
  held[index] = outs;
  const args = [w.pointers(ins.map(b => b.at)), w.pointers(outs.map(b => b.at)), 0, w.alloc(step.scratch)];
  const textures = step.slots.map(s => model.textures[s]);
  return () => {
    ins.forEach((b, j) => {                 // texture -> memory (a view made now: the memory may have grown)
      if (b.kept || (b.loaded && b.input !== null && !model.fresh[b.input])) return;   // not changed since read
      const data = model.read(textures[step.outputs + j], b.n), dst = new b.T(w.memory.buffer, b.at, b.n);
      if (b.T === BigInt64Array) for (let i = 0; i < b.n; i++) dst[i] = BigInt(data[i]);
      else dst.set(data);
      if (b.fixed) b.kept = true;           // a constant: read once
      b.loaded = true;
    });
    const r = w.call(step.wasm, ...args);
    if (r.rc) return {entry: step.wasm, rc: r.rc, record: r.record};
    for (const [j, b] of outs.entries()) {   // memory -> texture
      const src = new b.T(w.memory.buffer, b.at, b.n), t = textures[j];
      let data = src;
      if (b.T === BigInt64Array) {
        data = new Int32Array(b.n);
        for (let i = 0; i < b.n; i++) {
          const v = src[i];
          if (v < -2147483648n || v > 2147483647n) return {entry: step.wasm, rc: FXC_NARROW_FAULT, record: null};
          data[i] = Number(v);
        }
      } else if (!t.float && b.T !== Int32Array) data = Int32Array.from(src);
      model.upload(t, data);
      model.gl.bindTexture(model.gl.TEXTURE_2D, null);   // never left bound where a later draw renders into it
    }
    return null;
  };
}
