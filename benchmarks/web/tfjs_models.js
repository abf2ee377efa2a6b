// The three reference models of fxc.testing.models, written with TensorFlow.js ops (NHWC), batch 1.
//
//   const out = TFJS_MODELS[name](w, inputs, meta);   // w: {pytorch state_dict name: tf.Tensor}, inside tf.tidy
//
// The weights come from benchmarks/browser_peers.py's plain binary export under the PyTorch names, already in
// TF.js layouts: conv HWIO, depthwise HWC1, linear (in, out); everything else as PyTorch holds it. The
// architectures follow fxc/testing/models.py line by line (BatchNorm in eval mode, ReLU6, exact erf GELU).
"use strict";

function bn(x, w, p) {              // BatchNorm2d, eval mode (PyTorch eps 1e-5)
  return tf.batchNorm(x, w[p + ".running_mean"], w[p + ".running_var"], w[p + ".bias"], w[p + ".weight"], 1e-5);
}

function resnet18(w, [x]) {
  let y = tf.maxPool(tf.relu(bn(tf.conv2d(x, w["conv1.weight"], 2, 3), w, "bn1")), 3, 2, 1);
  for (let l = 1; l <= 4; l++) {
    for (let b = 0; b < 2; b++) {
      const p = `layer${l}.${b}`, s = l > 1 && b === 0 ? 2 : 1;
      let o = tf.relu(bn(tf.conv2d(y, w[p + ".conv1.weight"], s, 1), w, p + ".bn1"));
      o = bn(tf.conv2d(o, w[p + ".conv2.weight"], 1, 1), w, p + ".bn2");
      const down = w[p + ".downsample.0.weight"];
      y = tf.relu(tf.add(o, down ? bn(tf.conv2d(y, down, s, 0), w, p + ".downsample.1") : y));
    }
  }
  return tf.add(tf.matMul(tf.mean(y, [1, 2]), w["fc.weight"]), w["fc.bias"]);
}

const MOBILENET_V2 = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
                      [6, 320, 1, 1]];        // t (expansion), c (channels), n (repeats), s (stride)

function convBNReLU6(x, w, p, stride, depthwise) {
  const f = w[p + ".0.weight"], pad = (f.shape[0] - 1) / 2;
  const c = depthwise ? tf.depthwiseConv2d(x, f, stride, pad) : tf.conv2d(x, f, stride, pad);
  return tf.relu6(bn(c, w, p + ".1"));
}

function mobilenetV2(w, [x]) {
  let y = convBNReLU6(x, w, "features.0", 2, false), cin = y.shape[3], i = 1;
  for (const [t, c, n, s] of MOBILENET_V2) {
    for (let r = 0; r < n; r++, i++) {
      const p = `features.${i}.conv`, stride = r === 0 ? s : 1;
      let o = y, j = 0;
      if (t !== 1) o = convBNReLU6(o, w, `${p}.${j++}`, 1, false);
      o = convBNReLU6(o, w, `${p}.${j++}`, stride, true);
      o = bn(tf.conv2d(o, w[`${p}.${j}.weight`], 1, 0), w, `${p}.${j + 1}`);
      y = stride === 1 && cin === c ? tf.add(y, o) : o;
      cin = c;
    }
  }
  y = convBNReLU6(y, w, `features.${i}`, 1, false);
  return tf.add(tf.matMul(tf.mean(y, [1, 2]), w["classifier.1.weight"]), w["classifier.1.bias"]);
}

function layerNorm(x, w, p, eps) {
  const {mean, variance} = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, eps))), w[p + ".weight"]), w[p + ".bias"]);
}

function dense(x, w, p) {
  return tf.add(tf.matMul(x, w[p + ".weight"]), w[p + ".bias"]);
}

function bert(w, [ids, mask], meta) {   // ids, mask: int32 (1, S); meta: {heads, eps}
  const S = ids.shape[1], H = w["word_embeddings.weight"].shape[1], heads = meta.heads, d = H / heads;
  let x = tf.gather(w["word_embeddings.weight"], ids.reshape([S]));
  x = tf.add(tf.add(x, tf.slice(w["position_embeddings.weight"], [0, 0], [S, H])),
             tf.slice(w["token_type_embeddings.weight"], [0, 0], [1, H]));
  x = layerNorm(x, w, "emb_norm", meta.eps);
  const additive = tf.mul(tf.sub(1, tf.cast(mask, "float32")), -10000).reshape([1, 1, S]);
  const split = (t) => tf.transpose(t.reshape([S, heads, d]), [1, 0, 2]);      // (heads, S, d)
  for (let l = 0; w[`layers.${l}.attn_norm.weight`]; l++) {
    const p = `layers.${l}`;
    const q = split(dense(x, w, p + ".attention.query")), k = split(dense(x, w, p + ".attention.key"));
    const v = split(dense(x, w, p + ".attention.value"));
    const probs = tf.softmax(tf.add(tf.div(tf.matMul(q, k, false, true), Math.sqrt(d)), additive));
    const ctx = tf.transpose(tf.matMul(probs, v), [1, 0, 2]).reshape([S, H]);
    x = layerNorm(tf.add(x, dense(ctx, w, p + ".attention.out")), w, p + ".attn_norm", meta.eps);
    const h = dense(x, w, p + ".ffn_in");
    const gelu = tf.mul(tf.mul(h, 0.5), tf.add(tf.erf(tf.div(h, Math.SQRT2)), 1));
    x = layerNorm(tf.add(x, dense(gelu, w, p + ".ffn_out")), w, p + ".ffn_norm", meta.eps);
  }
  return x.reshape([1, S, H]);
}

const TFJS_MODELS = {resnet18: resnet18, mobilenet_v2: mobilenetV2, bert: bert};
