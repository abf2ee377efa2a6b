// fxc's WebGPU plan runtime: runs a model compiled for the `webgpu` target (fxc.backends.webgpu.wgsl.render_wgsl).
//
//   const g = await FxcWebGPU.open();           // an adapter and a device, or an Error saying what is missing
//   const m = await g.model(program, plan, arenaBytes, consts);   // pipelines compiled once a page (by shader text)
//   const [err, outs, times, fault] = await m.run(inputs, outputs, timed);   // one submit, one read-back (and one
//                                                 // more per wasm step: fxc/runtime/browser/wasm/webgpu_steps.js)
//
// Every tensor of a model lives in one storage buffer, the arena (fxc.runtime.browser.webgpu lays it out: byte offsets);
// constants are written into it once, inputs before each run (weights only when they changed: the host decides).
// Each launch of the plan has a bind group made once: the arena, a slice of a uniform buffer holding its operands'
// byte offsets, and the 4-word error buffer. A run encodes every launch into one compute pass (WebGPU orders
// dispatches and makes each one's writes visible to the next), copies the error words and the outputs into one
// staging buffer and maps it: one queue submission and one read-back per model call.
"use strict";

class FxcWebGPU {
  static async open() {
    if (!navigator.gpu)
      throw new Error("this browser has no WebGPU (navigator.gpu is undefined; Chromium needs " +
                      "--enable-unsafe-webgpu on Linux, and a secure page: fxc.runtime.browser.page serves one)");
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) throw new Error("this browser's WebGPU found no adapter (requestAdapter() gave null)");
    const L = adapter.limits, want = {};
    for (const k of ["maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupStorageSize",
                     "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX", "maxComputeWorkgroupSizeY",
                     "maxComputeWorkgroupSizeZ", "maxComputeWorkgroupsPerDimension"]) want[k] = L[k];
    const device = await adapter.requestDevice({requiredLimits: want});
    const g = new FxcWebGPU();
    g.device = device;
    g.lost = null;
    device.lost.then(info => { g.lost = info.message || "the device was lost"; });
    const ai = adapter.info || {};
    g.info = {vendor: ai.vendor || "", architecture: ai.architecture || "", description: ai.description || "",
              fallback: !!adapter.isFallbackAdapter, max_storage_bytes: L.maxStorageBufferBindingSize,
              max_buffer_bytes: L.maxBufferSize, local_memory_bytes: L.maxComputeWorkgroupStorageSize,
              max_work_group_size: L.maxComputeInvocationsPerWorkgroup,
              max_work_group_dims: [L.maxComputeWorkgroupSizeX, L.maxComputeWorkgroupSizeY, L.maxComputeWorkgroupSizeZ],
              max_groups: L.maxComputeWorkgroupsPerDimension, uniform_align: L.minUniformBufferOffsetAlignment};
    const entry = (binding, type) => ({binding, visibility: GPUShaderStage.COMPUTE, buffer: {type}});
    g.layout = device.createBindGroupLayout({entries: [entry(0, "storage"), entry(1, "uniform"),
                                                        entry(2, "storage")]});
    g.pipelineLayout = device.createPipelineLayout({bindGroupLayouts: [g.layout]});
    g.compiled = new Map();         // shader text -> its pipeline (a promise): every shader is compiled once a page
    return g;
  }

  async pipeline(name, shader) {
    let p = this.compiled.get(shader);
    if (!p) {
      p = this.compile(name, shader);
      this.compiled.set(shader, p);
      p.catch(() => this.compiled.delete(shader));
    }
    return p;
  }

  async compile(name, shader) {
    const d = this.device, module = d.createShaderModule({code: shader, label: name});
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter(m => m.type === "error");
    if (errors.length)
      throw new Error(`WGSL compile failed: ${name}: ` +
                      errors.map(m => `${m.lineNum}:${m.linePos}: ${m.message}`).join("\n") + "\n" + shader);
    try {
      return await d.createComputePipelineAsync({layout: this.pipelineLayout, compute: {module, entryPoint: "main"}});
    } catch (e) {
      throw new Error(`WGSL compile failed: ${name}: the pipeline: ${e.message}\n${shader}`);
    }
  }

  // program: {kernels: {name: {shader, params}}}; plan: [{kernel, offsets: [byte offset per param], groups: [x, y,
  // z]}]; consts: [[byte offset, Uint8Array]]
  async model(program, plan, arenaBytes, consts, wasm = null) {   // wasm: the bytes of the module of its wasm steps
    const d = this.device, align = this.info.uniform_align;
    const pipelines = {};
    await Promise.all(Object.entries(program.kernels).map(async ([name, k]) => {   // compiled concurrently
      pipelines[name] = await this.pipeline(name, k.shader);
    }));
    const usage = GPUBufferUsage;
    d.pushErrorScope("out-of-memory");
    d.pushErrorScope("validation");
    const arena = d.createBuffer({size: Math.max(16, arenaBytes), usage: usage.STORAGE | usage.COPY_DST |
                                 usage.COPY_SRC});
    const errors = d.createBuffer({size: 16, usage: usage.STORAGE | usage.COPY_DST | usage.COPY_SRC});
    const launches = this.launches(plan, pipelines, arena, errors);
    d.queue.writeBuffer(errors, 0, new Int32Array(4));
    for (const [offset, data] of consts) d.queue.writeBuffer(arena, offset, data);
    const bad = await d.popErrorScope(), oom = await d.popErrorScope();
    if (bad || oom) throw new Error(`the model's buffers could not be made: ${(bad || oom).message}`);
    const m = new FxcWebGPUModel(this, arena, errors, launches);
    if (wasm) m.wasm = await FxcWasm.load(wasm);
    m.launches = launches.map(l => l.wasm ? {host: fxcGpuWasmStep(m, l)} : l);
    return m;
  }

  // the launches of a plan over an arena: per launch its pipeline, a bind group made once (the arena, its slice of
  // one uniform buffer of operand byte offsets, the error words) and its work-groups
  launches(plan, pipelines, arena, errors) {
    const d = this.device, align = this.info.uniform_align;
    const slot = n => Math.ceil(Math.max(1, Math.ceil(n / 4)) * 16 / align) * align;
    const total = plan.reduce((s, st) => s + (st.wasm ? 0 : slot(st.offsets.length)), 0);
    const usage = GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST;
    const offsets = d.createBuffer({size: Math.max(16, total), usage});
    const words = new Int32Array(total / 4);
    const launches = [];
    let at = 0;
    for (const st of plan) {
      if (st.wasm) { launches.push(st); continue; }     // a wasm step: made by model() or replan()
      words.set(st.offsets, at / 4);
      const size = Math.max(1, Math.ceil(st.offsets.length / 4)) * 16;
      const group = d.createBindGroup({layout: this.layout, entries: [
        {binding: 0, resource: {buffer: arena}}, {binding: 1, resource: {buffer: offsets, offset: at, size}},
        {binding: 2, resource: {buffer: errors}}]});
      launches.push([pipelines[st.kernel], group, st.groups]);
      at += slot(st.offsets.length);
    }
    d.queue.writeBuffer(offsets, 0, words);
    return launches;
  }
}

class FxcWebGPUModel {
  constructor(gpu, arena, errors, launches) {
    Object.assign(this, {gpu, arena, errors, launches, staging: null, stagingBytes: 0});
  }

  // inputs: [[byte offset, Uint8Array]]; outputs: [[byte offset, bytes]]; returns [error words, [Uint8Array],
  // times]: with `timed`, each launch is its own submission, waited for: times[i] is launch i's milliseconds
  async run(inputs, outputs, timed) {
    const d = this.gpu.device;
    if (this.gpu.lost) throw new Error(`the WebGPU device was lost: ${this.gpu.lost}`);
    for (const [offset, data] of inputs) d.queue.writeBuffer(this.arena, offset, data);
    const round = n => Math.ceil(n / 4) * 4;
    const need = 16 + outputs.reduce((s, [, n]) => s + round(n), 0);
    if (need > this.stagingBytes) {
      if (this.staging) this.staging.destroy();
      this.staging = d.createBuffer({size: need, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
      this.stagingBytes = need;
    }
    const times = [];
    if (timed) await d.queue.onSubmittedWorkDone();
    let enc = d.createCommandEncoder(), pending = [];
    for (const launch of this.launches) {
      const t0 = timed ? performance.now() : 0;
      if (launch.host) {                  // a wasm step (fxc/runtime/browser/wasm/webgpu_steps.js) submits what came before
        this.encode(enc, pending);
        pending = [];
        const fault = await launch.host(enc);
        if (fault) return [[0, 0, 0, 0], [], times, fault];
        enc = d.createCommandEncoder();
      } else if (timed) {
        this.encode(enc, [launch]);
        d.queue.submit([enc.finish()]);
        await d.queue.onSubmittedWorkDone();
        enc = d.createCommandEncoder();
      } else pending.push(launch);
      if (timed) times.push(performance.now() - t0);
    }
    this.encode(enc, pending);
    enc.copyBufferToBuffer(this.errors, 0, this.staging, 0, 16);
    let at = 16;
    for (const [offset, n] of outputs) {
      if (n) enc.copyBufferToBuffer(this.arena, offset, this.staging, at, round(n));
      at += round(n);
    }
    d.queue.submit([enc.finish()]);
    await this.staging.mapAsync(GPUMapMode.READ, 0, need);
    const bytes = new Uint8Array(this.staging.getMappedRange(0, need).slice(0));
    this.staging.unmap();
    const err = Array.from(new Int32Array(bytes.buffer, 0, 4));
    if (err[0] || err[1]) d.queue.writeBuffer(this.errors, 0, new Int32Array(4));
    const outs = [];
    at = 16;
    for (const [, n] of outputs) { outs.push(bytes.subarray(at, at + n)); at += round(n); }
    return [err, outs, times, null];
  }

  encode(enc, launches) {           // launches in one compute pass
    if (!launches.length) return;
    const pass = enc.beginComputePass();
    for (const [pipeline, group, [x, y, z]] of launches) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(x, y, z);
    }
    pass.end();
  }

  // another plan over the same arena (a model with a symbolic size, at another size: fxc.runtime.row_plan);
  // its pipelines come from the page's cache (by shader text)
  async replan(program, plan) {
    const pipelines = {};
    for (const name of new Set(plan.filter(st => !st.wasm).map(st => st.kernel)))
      pipelines[name] = await this.gpu.pipeline(name, program.kernels[name].shader);
    const launches = this.gpu.launches(plan, pipelines, this.arena, this.errors);
    this.launches = launches.map(l => l.wasm ? {host: fxcGpuWasmStep(this, l)} : l);
  }

  destroy() {
    this.arena.destroy();
    this.errors.destroy();
    if (this.staging) this.staging.destroy();
  }
}

// the RPC's data: {b64}: inline base64 (small), {file}: bytes Python put on the page's server (fxc.runtime.browser.page)
async function fxcData(payload) {
  if (payload.file === undefined) return fxcBytes(payload.b64);
  const r = await fetch(payload.file);
  if (!r.ok) throw new Error(`the page could not fetch its data (${payload.file}: HTTP ${r.status})`);
  return new Uint8Array(await r.arrayBuffer());
}

// the outputs for Python: base64 strings inside the reply, or (post: a path) posted back as one file Python takes
async function fxcReturn(outs, post) {
  if (post === null) return outs.map(fxcBase64);
  const r = await fetch(post, {method: "POST", body: new Blob(outs)});
  if (!r.ok) throw new Error(`the page could not send its outputs back (${post}: HTTP ${r.status})`);
  return null;
}

// base64 <-> bytes (the RPC from Python passes strings)
function fxcBytes(b64) {
  const s = atob(b64), bytes = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) bytes[i] = s.charCodeAt(i);
  return bytes;
}

function fxcBase64(bytes) {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
