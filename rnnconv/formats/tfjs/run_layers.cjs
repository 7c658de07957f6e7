// rnnconv's TensorFlow.js runner: a layers model loaded by TensorFlow.js itself (tf.loadLayersModel on the
// model.json and its shards), then named recurrent layers of it run one after the other from given initial states.
// Each layer runs as a layer of its own class built from its own config with return_sequences and return_state set
// (a saved layer returns neither its states nor takes them), holding the weights TensorFlow.js loaded into it.
//
// node run_layers.cjs NODE_MODULES MODEL_JSON REQUEST_JSON FOLDER
// REQUEST_JSON: {"layers": [names], "batch": B, "steps": T, "input": I, "hidden": H, "directions": D, "lstm": bool}
// FOLDER holds x.f32 (B, T, I), h0.f32 and c0.f32 (L*D, B, H), raw little-endian float32; y.f32 (B, T, D*H),
// h_n.f32 and c_n.f32 (L*D, B, H) are written there. Exit 2: TensorFlow.js refused the model or the request.
//
// REQUEST_JSON {"stream": true}: a streaming model, run whole (its inputs x and the states, its outputs y and the next
// states) call after call by one process: it answers a line `rnnconv {"inputs": [names], "outputs": [names]}`, then
// for each line {"shapes": [shape of each input]} on stdin runs the model on FOLDER's in0.f32, in1.f32, ... and
// answers `rnnconv {"shapes": [...]}` once out0.f32, out1.f32, ... are written. It ends when stdin does.
'use strict';
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const [modules, modelPath, requestPath, folder] = process.argv.slice(2);

function floats(name, shape) {
  const bytes = fs.readFileSync(path.join(folder, name));
  const values = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  return tf.tensor(values, shape, 'float32');
}

function save(name, tensors) {
  const parts = tensors.map((t) => {
    const values = t.dataSync();
    return Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  });
  fs.writeFileSync(path.join(folder, name), Buffer.concat(parts));
}

function artifacts(document) {
  // As TensorFlow.js's own loaders do: every group's shards joined in order, the groups one after the other.
  const specs = [];
  const shards = [];
  for (const group of document.weightsManifest) {
    specs.push(...group.weights);
    for (const shard of group.paths) {
      shards.push(fs.readFileSync(path.join(path.dirname(modelPath), shard)));
    }
  }
  const data = Buffer.concat(shards);
  return {
    modelTopology: document.modelTopology,
    weightSpecs: specs,
    weightData: data.buffer.slice(data.byteOffset, data.byteOffset + data.length),
  };
}

function find(model, name) {
  for (const layer of model.layers) {
    if (layer.name === name) return layer;
    if (layer.layers) {
      const inner = find(layer, name);
      if (inner) return inner;
    }
  }
  return null;
}

function stateful(layer) {
  // The layer rebuilt from its config, returning its sequence and its final states, with its loaded weights.
  const settings = (l) => ({ ...l.getConfig(), returnSequences: true, returnState: true, goBackwards: false });
  if (layer.getClassName() === 'Bidirectional') {
    const inner = layer.forwardLayer;
    const rebuilt = new inner.constructor({ ...settings(inner), name: undefined });
    return tf.layers.bidirectional({ layer: rebuilt, mergeMode: 'concat' });
  }
  return new layer.constructor({ ...settings(layer), name: undefined });
}

function answer(said) {
  process.stdout.write(`rnnconv ${JSON.stringify(said)}\n`);
}

async function serve(model) {
  answer({ inputs: model.inputNames, outputs: model.outputNames });
  for await (const line of readline.createInterface({ input: process.stdin, terminal: false })) {
    const { shapes } = JSON.parse(line);
    const outputs = tf.tidy(() => {
      const got = model.predictOnBatch(shapes.map((shape, i) => floats(`in${i}.f32`, shape)));
      return Array.isArray(got) ? got : [got];
    });
    outputs.forEach((t, i) => save(`out${i}.f32`, [t]));
    answer({ shapes: outputs.map((t) => t.shape) });
    tf.dispose(outputs);
  }
}

let tf;
async function main() {
  tf = require(path.join(modules, '@tensorflow/tfjs'));
  await tf.setBackend('cpu');
  const request = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  const document = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
  const model = await tf.loadLayersModel(tf.io.fromMemory(artifacts(document)));
  if (request.stream) return serve(model);
  const { batch, steps, input, hidden, directions, lstm } = request;
  const depth = request.layers.length * directions;
  let x = floats('x.f32', [batch, steps, input]);
  const h0 = tf.unstack(floats('h0.f32', [depth, batch, hidden]));
  const c0 = lstm ? tf.unstack(floats('c0.f32', [depth, batch, hidden])) : null;
  const hs = [];
  const cs = [];
  request.layers.forEach((name, index) => {
    const layer = find(model, name);
    if (layer === null) throw new Error(`the model has no layer ${JSON.stringify(name)}`);
    const run = stateful(layer);
    const states = [];
    for (let d = 0; d < directions; d++) {
      states.push(h0[index * directions + d]);
      if (lstm) states.push(c0[index * directions + d]);
    }
    run.apply(x.slice([0, 0, 0], [batch, 1, x.shape[2]]), { initialState: states }); // builds it, as a call does
    run.setWeights(layer.getWeights());
    const [y, ...finals] = run.apply(x, { initialState: states });
    const per = lstm ? 2 : 1;
    for (let d = 0; d < directions; d++) {
      hs.push(finals[d * per]);
      if (lstm) cs.push(finals[d * per + 1]);
    }
    x = y;
  });
  save('y.f32', [x]);
  save('h_n.f32', hs);
  if (lstm) save('c_n.f32', cs);
}

main().catch((error) => {
  process.stderr.write(`${error && error.message ? error.message : error}\n`);
  process.exit(2);
});
