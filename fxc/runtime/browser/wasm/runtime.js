// fxc's WebAssembly plan runtime: runs a model compiled for the `wasm` target (fxc.backends.wasm.link) in a browser.
//
//   const w = await FxcWasm.load(bytes, threads, pages);   // compile + instantiate one .wasm module (its memory;
//                                                  // threads > 1: shared, with threads web workers)
//   const m = new FxcWasmModel(w, spec);          // buffers of one model: inputs, outputs, constants, workspace
//   m.load("consts", arrayBuffer, records);       // write constants or inputs ([offset, bytes] in the buffer)
//   await m.step(fresh); await m.post(url);       // run the plan ({rc, record}); POST the outputs (one file)
//   w.call("fxc_group3", [inPtrs], [outPtrs], work)   // one entry of a group module (for webgl/webgpu fallbacks)
//
// The module exports its memory, `__heap_base` (buffers are placed from there, 64-byte aligned, growing the memory
// as needed), its entries (`fxc_run(inputs, outputs, consts, work)`: arrays of 32-bit addresses; `fxc_prepack` and
// `fxc_run_main` when weights are packed once) and `fxc_index_error` (op, index, size of an out-of-range index).
// An entry returns 0, or 2 (an integer division by zero) | 4 (an index out of range). Its imports are the math
// functions WebAssembly has no instruction for, from Math (FXC_WASM_IMPORTS; fxc.backends.wasm.link.JS_IMPORTS).
//
// Threads (a module linked for -num-threads=N): the memory is a shared WebAssembly.Memory (the page must be
// cross-origin isolated: COOP/COEP) and N web workers instantiate the same module on it, each with a stack of its
// own. Worker 0 runs the plan (`run`: the page posts the entry and its arguments and awaits the answer, so the
// page's thread never spins while kernels run); workers 1..N-1 sleep in the module's fxc_worker(k) until a parallel
// loop wakes them (fxc.backends.wasm.link.POOL_IR). The page's own instance only places buffers and reads the memory.
"use strict";

function fxcWasmImports() {
  const M = {sin: Math.sin, cos: Math.cos, tan: Math.tan, asin: Math.asin, acos: Math.acos, atan: Math.atan,
             sinh: Math.sinh, cosh: Math.cosh, tanh: Math.tanh, asinh: Math.asinh, acosh: Math.acosh,
             atanh: Math.atanh, exp: Math.exp, expm1: Math.expm1, log: Math.log, log1p: Math.log1p,
             log2: Math.log2, log10: Math.log10, exp2: x => Math.pow(2, x), cbrt: Math.cbrt, pow: Math.pow,
             atan2: Math.atan2, hypot: Math.hypot, fmod: (a, b) => a % b};
  const env = {};
  for (const [name, fn] of Object.entries(M)) { env[name] = fn; env[name + "f"] = fn; }   // float: rounded by wasm
  env.fmaf = (a, b, c) => a * b + c;        // float32 a * b is exact in double
  env.fxc_profile_now = () => BigInt(Math.round(performance.now() * 1e6));
  return env;
}
const FXC_WASM_IMPORTS = fxcWasmImports();

function fxcToBase64(bytes) {       // base64 of a Uint8Array (small data for the harness's call, no file)
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fxcFromBase64(b64) {       // the bytes of base64 text, as an ArrayBuffer
  const s = atob(b64), out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out.buffer;
}
const FXC_WASM_STACK = 8 << 20;      // bytes of each worker's stack (fxc.backends.wasm.link.STACK_BYTES)

// a worker: instantiate the module on the shared memory, take its own stack, report; worker 0 then runs the entries
// the page posts (answering {rc, runs}: the plans it has run), the others serve the pool forever
const FXC_WASM_WORKER = `"use strict";
const FXC_WASM_IMPORTS = (${fxcWasmImports.toString()})();
onmessage = async (e) => {
  const {module, memory, index, stack} = e.data;
  const {exports} = await WebAssembly.instantiate(module, {env: {...FXC_WASM_IMPORTS, memory}});
  exports.__stack_pointer.value = stack;
  if (index === 0) {
    let runs = 0;
    onmessage = (c) => {
      const fn = exports[c.data.entry];
      postMessage(fn ? {rc: fn(...c.data.args), runs: ++runs} : {missing: c.data.entry});
    };
  }
  postMessage(index);
  if (index > 0) exports.fxc_worker(index);
};`;

class FxcWasm {
  static async load(bytes, threads = 1, pages = null) {
    const module = await WebAssembly.compile(bytes);
    if (threads <= 1) return new FxcWasm(await WebAssembly.instantiate(module, {env: FXC_WASM_IMPORTS}));
    if (!globalThis.crossOriginIsolated)
      throw new Error("a threaded wasm module needs shared memory: serve the page with the headers " +
                      "Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp");
    const memory = new WebAssembly.Memory({initial: pages[0], maximum: pages[1], shared: true});
    const w = new FxcWasm(await WebAssembly.instantiate(module, {env: {...FXC_WASM_IMPORTS, memory}}), memory);
    await w.startWorkers(module, threads);
    return w;
  }

  async startWorkers(module, n) {    // the plan's worker (0) and n - 1 pool workers asleep in fxc_worker
    const url = URL.createObjectURL(new Blob([FXC_WASM_WORKER], {type: "text/javascript"}));
    this.workers = [];
    const ready = [];
    for (let k = 0; k < n; k++) {
      const worker = new Worker(url);
      this.workers.push(worker);
      ready.push(new Promise((resolve, reject) => { worker.onmessage = resolve; worker.onerror = reject; }));
      worker.postMessage({module, memory: this.memory, index: k, stack: this.alloc(FXC_WASM_STACK) + FXC_WASM_STACK});
    }
    await Promise.all(ready);
    URL.revokeObjectURL(url);
    this.planner = this.workers[0];
    this.planRuns = 0;               // entries run by the plan's worker (its own count, from its last answer)
    Atomics.store(new Int32Array(this.memory.buffer), this.exports.fxc_pool_workers.value >> 2, n - 1);
  }

  constructor(instance, memory = null) {
    this.exports = instance.exports;
    this.memory = memory || instance.exports.memory;
    this.top = instance.exports.__heap_base.value;
    const rec = instance.exports.fxc_index_error;
    this.record = rec ? rec.value : 0;
  }

  alloc(nbytes) {                    // a 64-byte aligned buffer of the module's memory (never freed: one model)
    const at = Math.ceil(this.top / 64) * 64, end = at + Math.max(nbytes, 1);
    const have = this.memory.buffer.byteLength;
    if (end > have) this.memory.grow(Math.ceil((end - have) / 65536));
    this.top = end;
    return at;
  }

  bytes(at, n) { return new Uint8Array(this.memory.buffer, at, n); }

  pointers(addresses) {              // an array of 32-bit addresses in the module's memory
    const at = this.alloc(4 * Math.max(addresses.length, 1));
    new Uint32Array(this.memory.buffer, at, addresses.length).set(addresses);
    return at;
  }

  call(entry, ...args) {             // an entry's return code (0: fine) and, on 4, the index record (this thread)
    const fn = this.exports[entry];
    if (!fn) throw new Error(`the wasm module has no entry ${entry}`);
    return this.answer(fn(...args));
  }

  async run(entry, ...args) {        // as call, on the plan's worker when the module is threaded (the page waits idle)
    if (!this.planner) return this.call(entry, ...args);
    const got = await new Promise((resolve, reject) => {
      this.planner.onmessage = e => resolve(e.data);
      this.planner.onerror = e => reject(new Error(`the wasm plan's worker failed: ${e.message}`));
      this.planner.postMessage({entry, args});
    });
    if (got.missing) throw new Error(`the wasm module has no entry ${got.missing}`);
    this.planRuns = got.runs;
    return this.answer(got.rc);
  }

  answer(rc) {
    let record = null;
    if (rc & 4 && this.record) record = Array.from(new BigInt64Array(this.memory.buffer, this.record, 3), Number);
    return {rc, record};
  }

  write(at, b64) {                   // base64 (small data from a script) straight into the module's memory
    const src = new Uint8Array(fxcFromBase64(b64));
    this.bytes(at, src.length).set(src);
  }

  read(at, n) { return fxcToBase64(this.bytes(at, n)); }   // base64 of n bytes of the module's memory
}

class FxcWasmModel {
  // spec: {inputs: [bytes], outputs: [bytes], consts: [bytes], workspace: bytes, prepack: bool} (in bytes)
  constructor(wasm, spec) {
    const w = this.wasm = wasm;
    this.spec = spec;
    this.ins = spec.inputs.map(n => w.alloc(n));
    this.outs = spec.outputs.map(n => w.alloc(n));
    this.consts = spec.consts.map(n => w.alloc(n));
    this.work = w.alloc(spec.workspace);
    this.args = [w.pointers(this.ins), w.pointers(this.outs), w.pointers(this.consts), this.work];
  }

  size(ins, outs, work, header, values) {   // a symbolic model's call: its buffers' bytes (grown, never shrunk;
    const w = this.wasm;                   // the workspace keeps its packed weights), the symbols' int64 values
    let moved = false;
    const grow = (ptrs, have, need) => need.forEach((n, i) => {
      if (n > have[i]) { ptrs[i] = w.alloc(n); have[i] = n; moved = true; }
    });
    this.cap = this.cap || {ins: this.spec.inputs.slice(), outs: this.spec.outputs.slice(), work: this.spec.workspace};
    grow(this.ins, this.cap.ins, ins);
    grow(this.outs, this.cap.outs, outs);
    if (work > this.cap.work) {
      const at = w.alloc(work);
      w.bytes(at, this.cap.work).set(w.bytes(this.work, this.cap.work));
      this.work = at;
      this.cap.work = work;
      moved = true;
    }
    if (moved) this.args = [w.pointers(this.ins), w.pointers(this.outs), w.pointers(this.consts), this.work];
    this.spec.outputs = outs;              // what post() sends
    new BigInt64Array(w.memory.buffer, this.work + header, values.length).set(values.map(BigInt));
  }

  async step(fresh) {                // the plan once; fresh: the weights changed (pack them again)
    const w = this.wasm;
    if (!this.spec.prepack) return w.run("fxc_run", ...this.args);
    if (fresh) {
      const r = await w.run("fxc_prepack", ...this.args);
      if (r.rc) return r;
    }
    return w.run("fxc_run_main", ...this.args);
  }

  load(which, buf, records) {        // which: "ins" or "consts"; records: [offset, bytes] in buf (null: not sent)
    records.forEach((r, i) => {
      if (r) this.wasm.bytes(this[which][i], r[1]).set(new Uint8Array(buf, r[0], r[1]));
    });
  }

  outputBytes() {                    // the outputs, one after another (a copy)
    const n = this.spec.outputs.reduce((a, b) => a + b, 0), body = new Uint8Array(n);
    let at = 0;
    this.outs.forEach((p, k) => {
      body.set(this.wasm.bytes(p, this.spec.outputs[k]), at);
      at += this.spec.outputs[k];
    });
    return body;
  }

  async post(url) {                  // the outputs POSTed to the harness's server (one file)
    const r = await fetch(url, {method: "POST", body: this.outputBytes()});
    if (!r.ok) throw new Error(`sending the outputs failed: HTTP ${r.status}`);
  }

  dispose() {                        // the model's module is dropped: its workers stop
    for (const worker of this.wasm.workers || []) worker.terminate();
  }

  async bench(runs) {                // ms per run of the plan alone (inputs and packed weights in place)
    await this.step(true);
    const t0 = performance.now();
    for (let k = 0; k < runs; k++) await this.step(false);
    return (performance.now() - t0) / runs;
  }
}

globalThis.FxcWasm = FxcWasm;
globalThis.FxcWasmModel = FxcWasmModel;
