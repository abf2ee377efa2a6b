// The static web package's loader (fxc web, fxc/deploy/web.py), shared by its targets: webgl (with the wasm kernels of
// what WebGL cannot express), webgpu and wasm. package.json lists every other part with its sha256 and size.
//
//   const {model, pkg, inputs} = await fxcLoadPackage("./");   // fetch, check every part, load the model
//   const {outputs} = await model.run(inputs);                  // typed arrays, in pkg.outputs' order
//
// Loads after the target's runtime.js (FxcWebGL, and FxcWasm when the package has wasm kernels; or FxcWebGPU; or
// FxcWasm and FxcWasmModel: fxc/runtime/browser/wasm/runtime.js, the wasm device module's own).
"use strict";

async function fxcFetchChecked(base, name, part) {
  const r = await fetch(base + name);
  if (!r.ok) throw new Error(`${name}: HTTP ${r.status}`);
  const buf = await r.arrayBuffer();
  const hex = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", buf)),
                         b => b.toString(16).padStart(2, "0")).join("");
  if (hex !== part.sha256 || buf.byteLength !== part.bytes)
    throw new Error(`${name}: sha256 ${hex} (${buf.byteLength} bytes) is not the package's ${part.sha256} ` +
                    `(${part.bytes} bytes); the file was modified or truncated: write the package again (fxc web)`);
  return buf;
}

async function fxcLoadPackage(base) {   // -> {model, pkg, inputs: the sample inputs}
  const pkg = await (await fetch(base + "package.json")).json();
  const parts = {};
  for (const [name, part] of Object.entries(pkg.parts)) parts[name] = await fxcFetchChecked(base, name, part);
  const desc = JSON.parse(new TextDecoder().decode(parts[pkg.layout]));
  const kind = pkg.target.split(" ")[0];
  if (kind === "webgpu") return fxcLoadWebGPU(pkg, parts, desc);
  if (kind === "wasm") return fxcLoadWasm(pkg, parts, desc);
  const consts = pkg.weights.tensors.map(t => fxcView(parts[pkg.weights.file], t));
  const inputs = pkg.sample.tensors.map(t => fxcView(parts[pkg.sample.file], t));
  const model = new FxcWebGL();
  if (pkg.wasm) model.wasm = await FxcWasm.load(parts[pkg.wasm]);   // the kernels WebGL cannot express
  model.load(desc, consts);
  return {model, pkg, inputs};
}

// webgpu: desc = {program, plan, arena_bytes, inputs: [byte offset], outputs: [byte offset], consts: [byte offset]};
// weights and sample are the tensors' bytes as the arena holds them ([start, bytes] records in their file)
const FXC_TYPED = {float32: Float32Array, int32: Int32Array, int64: BigInt64Array, int16: Int16Array,
                   int8: Int8Array, uint8: Uint8Array, bool: Uint8Array};

async function fxcLoadWebGPU(pkg, parts, desc) {
  const gpu = await FxcWebGPU.open();
  if (desc.arena_bytes > gpu.info.max_storage_bytes)
    throw new Error(`the model needs ${desc.arena_bytes} bytes of storage; this adapter binds at most ` +
                    `${gpu.info.max_storage_bytes} in one buffer`);
  const bytes = (file, [start, n]) => new Uint8Array(parts[file], start, n);
  const m = await gpu.model(desc.program, desc.plan, desc.arena_bytes,
                            pkg.weights.tensors.map((t, i) => [desc.consts[i], bytes(pkg.weights.file, t)]),
                            pkg.wasm ? parts[pkg.wasm] : null);    // the kernels WGSL cannot express
  const wanted = pkg.outputs.map((o, i) => [desc.outputs[i], desc.output_bytes[i]]);
  const model = {
    renderer: [gpu.info.vendor, gpu.info.architecture, gpu.info.description].filter(s => s).join(" ") + " (WebGPU)",
    async run(inputs) {
      const [err, outs, , fault] = await m.run(inputs.map((data, i) => [desc.inputs[i], data]), wanted, false);
      if (fault) return {outputs: [], fault};
      if (err[1]) throw new Error(`an index ${err[2]} out of range for a dimension of ${err[3]} (op ${err[1] - 1})`);
      if (err[0] === 1) throw new Error("integer division by zero in a kernel");
      if (err[0]) throw new Error("an int64 value beyond 32 bits reached a kernel (WGSL computes integers in 32 bits)");
      return {outputs: outs.map((b, i) => {
        const T = FXC_TYPED[pkg.outputs[i].dtype], a = new T(b.buffer.slice(b.byteOffset, b.byteOffset + b.length));
        return T === BigInt64Array ? Float64Array.from(a, Number) : a;
      })};
    },
  };
  return {model, pkg, inputs: pkg.sample.tensors.map(t => bytes(pkg.sample.file, t))};
}

// wasm: desc = {spec: the buffers' bytes and prepack (FxcWasmModel's), threads, memory_pages}; the model's module is
// pkg.module; weights and sample hold tensors at [offset, bytes] records (fxc.runtime.browser.wasm.pack). A threaded
// module needs a cross-origin-isolated page (fxc serve sends the headers; FxcWasm.load says so otherwise).
async function fxcLoadWasm(pkg, parts, desc) {
  const w = await FxcWasm.load(parts[pkg.module], desc.threads, desc.memory_pages);
  const m = new FxcWasmModel(w, desc.spec);
  m.load("consts", parts[pkg.weights.file], pkg.weights.tensors);
  let packed = false;                     // the weights packed once (fxc_prepack), at the first call
  const model = {
    renderer: `WebAssembly (wasm32, SIMD128), ${desc.threads} thread${desc.threads > 1 ? "s" : ""}`,
    async run(inputs) {
      inputs.forEach((data, i) => w.bytes(m.ins[i], data.byteLength).set(data));
      const r = await m.step(!packed);
      if (r.rc & 4) throw new Error(`an index ${r.record ? r.record[1] : "?"} out of range for a dimension of ` +
                                    `${r.record ? r.record[2] : "?"} (op ${r.record ? r.record[0] : "?"})`);
      if (r.rc & 2) throw new Error("integer division by zero in a kernel");
      if (r.rc) throw new Error(`the wasm module's plan returned ${r.rc}`);
      packed = true;
      return {outputs: m.outs.map((at, i) => {
        const T = FXC_TYPED[pkg.outputs[i].dtype], n = desc.spec.outputs[i];
        const a = new T(w.memory.buffer.slice(at, at + n));
        return T === BigInt64Array ? Float64Array.from(a, Number) : a;
      })};
    },
  };
  const bytes = t => new Uint8Array(parts[pkg.sample.file], t[0], t[1]);
  return {model, pkg, inputs: pkg.sample.tensors.map(bytes)};
}

// a symbolic batch (webgl): pkg.symbol {name, min, max}, the sample's size pkg.sample_size; dims "s" or "4*s"
function fxcPackageSize(pkg) {          // the page's ?size=N (else the sample's); null for a static model
  if (!pkg.symbol) return null;
  const asked = new URLSearchParams(location.search).get("size"), sym = pkg.symbol;
  const size = asked === null ? pkg.sample_size : Number(asked);
  if (!Number.isInteger(size) || size < sym.min || size > sym.max || size % (sym.divisor || 1))
    throw new Error(`size ${asked} of ${sym.name} is outside the compiled range [${sym.min}, ${sym.max}]` +
                    (sym.divisor > 1 ? ` or not a multiple of ${sym.divisor}` : "") + ": open the page with ?size=N in it");
  return size;
}

function fxcShape(shape, size) {        // a shape at the symbol's size
  return shape.map(d => typeof d === "string" ? (d.includes("*") ? Number(d.split("*")[0]) : 1) * size : d);
}

function fxcTile(inputs, pkg, size) {   // the sample's rows repeated (row r is the sample's row r % sample_size)
  return inputs.map((a, i) => {
    const shape = pkg.inputs[i].shape;
    if (!shape.some(d => typeof d === "string")) return a;
    const n = fxcShape(shape, size).reduce((x, y) => x * y, 1), out = new a.constructor(n);
    for (let k = 0; k < n; k++) out[k] = a[k % a.length];
    return out;
  });
}

function fxcSummary(arr, shape) {       // what the page shows of an output
  let min = Infinity, max = -Infinity, sum = 0, sumAbs = 0, arg = 0;
  for (let i = 0; i < arr.length; i++) {
    const v = arr[i];
    if (v < min) min = v;
    if (v > max) { max = v; arg = i; }
    sum += v; sumAbs += Math.abs(v);
  }
  return {shape, min, max, mean: sum / Math.max(arr.length, 1), mean_abs: sumAbs / Math.max(arr.length, 1),
          argmax: arg, first: Array.from(arr.slice(0, 8))};
}
