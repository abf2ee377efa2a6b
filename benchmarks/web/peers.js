// Runs one browser peer on one model and times it in the page (benchmarks/browser_peers.py drives this).
//
//   await runPeer({framework: "tfjs" | "ort", backend, threads, model, runs, warmup, budgetMs, meta,
//                  inputs: [{url, dtype, shape}], weights: "/models/x" (tfjs) | onnx: "/models/x.onnx" (ort)})
//   -> {times: [ms...], output: [numbers], shape, info: {...}}   or throws
//
// One timed run is what a user's call costs: make the input tensors from typed arrays, run the model, read the
// output back into a typed array (await data() / getData()), as fxc's own call uploads and reads back.
"use strict";

const TYPED = {float32: Float32Array, int32: Int32Array, int64: BigInt64Array};

async function fetchArray(url, dtype) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`fetch ${url}: ${r.status}`);
  return new TYPED[dtype](await r.arrayBuffer());
}

async function timeRuns(cfg, once) {
  for (let i = 0; i < cfg.warmup; i++) await once();
  const times = [], start = performance.now();
  let out;
  while (times.length < cfg.runs && (times.length < Math.min(5, cfg.runs) || performance.now() - start < cfg.budgetMs)) {
    const t0 = performance.now();
    out = await once();
    times.push(performance.now() - t0);
  }
  return {times, out};
}

function gpuInfo() {
  const gl = document.createElement("canvas").getContext("webgl2");
  const d = gl && gl.getExtension("WEBGL_debug_renderer_info");
  return gl ? (d ? gl.getParameter(d.UNMASKED_RENDERER_WEBGL) : gl.getParameter(gl.RENDERER)) : "no WebGL 2";
}

async function adapterInfo() {
  if (!navigator.gpu) return "no navigator.gpu";
  const a = await navigator.gpu.requestAdapter();
  if (!a) return "no WebGPU adapter";
  const i = a.info || {};
  return [i.vendor, i.architecture, i.device, i.description].filter((s) => s).join(" ") || "an adapter";
}

async function runTfjs(cfg) {
  if (cfg.backend === "wasm") {
    tf.wasm.setWasmPaths("/node_modules/@tensorflow/tfjs-backend-wasm/dist/");
    tf.wasm.setThreadsCount(cfg.threads);
  }
  if (!(await tf.setBackend(cfg.backend))) throw new Error(`tf.setBackend("${cfg.backend}") failed`);
  await tf.ready();
  const manifest = await (await fetch(cfg.weights + ".json")).json();
  const blob = await fetchArray(cfg.weights + ".bin", "float32");
  const w = {};
  for (const e of manifest) {
    const n = e.shape.reduce((a, b) => a * b, 1);
    w[e.name] = tf.tensor(blob.subarray(e.offset, e.offset + n), e.shape, "float32");
  }
  const data = await Promise.all(cfg.inputs.map((i) => fetchArray(i.url, i.dtype)));
  const model = TFJS_MODELS[cfg.model];
  const once = async () => {
    const y = tf.tidy(() => model(w, data.map((a, k) => tf.tensor(a, cfg.inputs[k].shape, cfg.inputs[k].dtype)),
                                  cfg.meta));
    const out = await y.data();
    y.dispose();
    return out;
  };
  const {times, out} = await timeRuns(cfg, once);
  const info = {tfjs: tf.version.tfjs, backend: tf.getBackend(), crossOriginIsolated: self.crossOriginIsolated};
  if (cfg.backend === "wasm") info.threads = tf.wasm.getThreadsCount ? tf.wasm.getThreadsCount() : cfg.threads;
  if (cfg.backend === "webgl") info.renderer = gpuInfo();
  return {times, output: Array.from(out), info};
}

async function runOrt(cfg) {
  ort.env.wasm.wasmPaths = "/node_modules/onnxruntime-web/dist/";
  ort.env.wasm.numThreads = cfg.threads;
  const session = await ort.InferenceSession.create(cfg.onnx, {executionProviders: [cfg.backend],
                                                               graphOptimizationLevel: "all"});
  const data = await Promise.all(cfg.inputs.map((i) => fetchArray(i.url, i.dtype)));
  const once = async () => {
    const feeds = {};
    session.inputNames.forEach((n, k) => { feeds[n] = new ort.Tensor(cfg.inputs[k].dtype, data[k],
                                                                      cfg.inputs[k].shape); });
    const res = await session.run(feeds);
    const t = res[session.outputNames[0]];
    const out = await t.getData();
    for (const v of Object.values(res)) if (v.dispose) v.dispose();
    return out;
  };
  const {times, out} = await timeRuns(cfg, once);
  const info = {ort: ort.env.versions ? ort.env.versions.web : "?", threads: ort.env.wasm.numThreads,
                crossOriginIsolated: self.crossOriginIsolated};
  if (cfg.backend === "webgl") info.renderer = gpuInfo();
  if (cfg.backend === "webgpu") info.adapter = await adapterInfo();
  await session.release();
  return {times, output: Array.from(out, Number), info};
}

async function runPeer(cfg) {
  if (cfg.threads > 1 && !self.crossOriginIsolated)
    throw new Error("threads need a cross-origin isolated page (COOP/COEP headers)");
  return cfg.framework === "tfjs" ? runTfjs(cfg) : runOrt(cfg);
}
