// The boundary between a WebGPU plan (fxc/runtime/browser/webgpu/runtime.js) and the wasm kernels of the groups WGSL cannot
// express (fxc.driver.page_kernels): a step of the plan that calls an entry of the model's wasm module (FxcWasm). The arena
// holds every tensor as its bytes (int64 as 8), the module's memory too, so a step copies bytes: what the launches
// before it have encoded is submitted with copies of the step's tensors into a staging buffer, which is mapped;
// the inputs go into the module's memory, the entry runs, and each output goes back into the arena (written in
// whole words over the bytes read, so neighbours keep theirs).
//
//   const run = fxcGpuWasmStep(model, step);   // step: {wasm, offsets, params: [[dtype, elements]], outputs, scratch}
//   const fault = await run(encoder);          // null, or {entry, rc, record} (fxc.runtime.browser.wasm.wasm_fault)
"use strict";

const FXC_BYTES = {float32: 4, int32: 4, int64: 8, int16: 2, int8: 1, uint8: 1, bool: 1};

function fxcGpuWasmStep(model, step) {
  const w = model.wasm, d = model.gpu.device;
  if (!w) throw new Error(`${step.wasm}: the plan has wasm kernels but no wasm module was loaded`);
  const round = n => Math.ceil(n / 4) * 4;
  const bufs = step.params.map(([dtype, n], p) => {
    const bytes = n * FXC_BYTES[dtype];
    return {bytes, at: w.alloc(bytes), arena: step.offsets[p]};
  });
  const outs = bufs.slice(0, step.outputs), ins = bufs.slice(step.outputs);
  const args = [w.pointers(ins.map(b => b.at)), w.pointers(outs.map(b => b.at)), 0, w.alloc(step.scratch)];
  let at = 0;
  for (const b of bufs) { b.staged = at; at += round(b.bytes); }
  const staging = d.createBuffer({size: Math.max(4, at), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
  return async (enc) => {        // enc: the launches before this step, not yet submitted
    for (const b of bufs) if (b.bytes) enc.copyBufferToBuffer(model.arena, b.arena, staging, b.staged, round(b.bytes));
    d.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const got = new Uint8Array(staging.getMappedRange().slice(0));
    staging.unmap();
    for (const b of ins) w.bytes(b.at, b.bytes).set(got.subarray(b.staged, b.staged + b.bytes));
    const r = w.call(step.wasm, ...args);
    if (r.rc) return {entry: step.wasm, rc: r.rc, record: r.record};
    for (const b of outs) {
      if (!b.bytes) continue;
      const words = got.slice(b.staged, b.staged + round(b.bytes));
      words.set(w.bytes(b.at, b.bytes));
      d.queue.writeBuffer(model.arena, b.arena, words);
    }
    return null;
  };
}
